"""The command line as a person runs it: a real process, one clear line for bad input."""

import importlib
import os
import re
import subprocess
import sys

import httpx
import pytest
import typer
from typer._click.core import Context
from typer.core import TyperGroup

from devstack.servers import free_port
from tests import command_line


def pressroom(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`pressroom ARGS` in a process of its own (tests/command_line.py), its output captured."""
    return command_line.run(list(args), {**os.environ, **(env or {})}, timeout=timeout)


def pressroom_each(*commands: tuple[str, ...], env: dict[str, str] | None = None) -> list[subprocess.CompletedProcess]:
    """Independent commands, each its own process, all at once: a command's cost is mostly starting
    Python, and the test need not pay it once after the other."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda command: pressroom(*command, env=env), commands))


def dev_down_and_forget(env: dict[str, str]) -> None:
    """`pressroom dev down`, then remove the stack's database (as root it lives outside the
    test's folder, in the PostgreSQL service user's own folder)."""
    import json
    import shutil
    from pathlib import Path

    from devstack.servers import SERVICE_ROOT

    try:
        data = json.loads((Path(env["PRESSROOM_HOME"]) / "stack.json").read_text()).get("postgres_data")
    except (FileNotFoundError, ValueError):
        data = None
    pressroom("dev", "down", env=env)
    if data and Path(data).is_relative_to(SERVICE_ROOT):
        shutil.rmtree(Path(data).parent, ignore_errors=True)


def assert_one_line_error(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0]


def test_every_command_has_help():
    commands = (["--help"], ["dev", "--help"], ["dev", "up", "--help"], ["migrate", "--help"],
                ["worker", "--help"], ["check", "--help"], ["temporal", "setup", "--help"],
                ["codec-server", "--help"], ["patches", "check", "--help"])
    for command, result in zip(commands, pressroom_each(*commands), strict=True):
        assert result.returncode == 0, (command, result.stderr)
        assert "Usage" in result.stdout


def test_the_listed_line_of_each_command_is_its_own_help_and_every_command_is_listed():
    """`pressroom --help` and a group's `--help` read starter.COMMANDS without importing the commands:
    each line there is the first paragraph of the command's own help, and every command of a module
    or a group is listed, in the group's order."""
    import starter

    for path, (module, line) in starter.COMMANDS.items():
        command = starter.load(path)
        assert " ".join(command.help.split("\n\n")[0].split()) == line, path
        assert module == command.callback.__module__ if command.callback else True
        if isinstance(command, TyperGroup):
            assert command.no_args_is_help, path  # as its listed stand-in
            assert list(command.commands) == starter.ListedCommands(path=path).list_commands(None), path
    modules = {module for module, _ in starter.COMMANDS.values()}
    for module in modules:
        app = typer.main.get_group(importlib.import_module(module).app)
        if not app.help:  # a module of top-level commands (not a job's group): each is listed itself
            assert set(app.commands) <= set(starter.COMMANDS), module


def help_shown(root: TyperGroup, path: str, capsys) -> str:
    """`pressroom PATH --help` as `root` shows it, the commands found as `root` finds them."""
    ctx, command = Context(root, info_name="pressroom"), root
    for word in path.split():
        command = command.get_command(ctx, word)
        ctx = Context(command, info_name=word, parent=ctx)
    capsys.readouterr()
    command.get_help(ctx)  # rich prints it
    return capsys.readouterr().out


def words(shown: str) -> str:
    """Help's words in order: the line breaks of a docstring (kept by rich) and the boxes left out."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", shown).split())


def test_a_group_listed_shows_the_help_the_group_itself_shows(capsys):
    """Each group's `--help` from the list, beside the same help rendered by the group loaded."""
    import starter

    groups = [path for path in starter.COMMANDS if any(other.startswith(f"{path} ") for other in starter.COMMANDS)]
    listed = typer.main.get_command(starter.app)
    loaded = typer.core.TyperGroup(name="pressroom", commands={path: starter.load(path) for path in groups
                                                               if " " not in path})
    for path in groups:
        shown = help_shown(listed, path, capsys)
        assert f"Usage: pressroom {path} [OPTIONS] COMMAND" in shown, path
        assert words(shown) == words(help_shown(loaded, path, capsys)), path


def test_version_the_command_list_and_each_groups_list_import_no_command_module():
    import starter

    groups = [path.split() for path in starter.COMMANDS if any(other.startswith(f"{path} ")
                                                               for other in starter.COMMANDS)]
    probe = ("import sys, starter\n"
             f"for args in [['--version'], ['--help'], *({groups!r})] + [[*group, '--help'] for group in {groups!r}]:\n"
             "    try:\n        starter.app(args=args, prog_name='pressroom', standalone_mode=False)\n"
             "    except BaseException:\n        pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('commands.', 'operations', 'pressroom.settings'))))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            cwd=command_line.ROOT)
    assert len(groups) > 10 and result.stdout.count("Usage") == 2 * len(groups) + 1
    assert result.stdout.splitlines()[-1] == "[]", result.stdout.splitlines()[-1]


def test_malformed_database_url_names_the_variable():
    result = pressroom("migrate", env={"DATABASE_URL": "mysql://localhost/x"})
    assert_one_line_error(result, "DATABASE_URL is invalid", "postgresql://")


def test_unreachable_database_names_the_server():
    result = pressroom("migrate", env={"DATABASE_URL": f"postgresql://u:pw@127.0.0.1:{free_port()}/x"})
    assert_one_line_error(result, "cannot connect to PostgreSQL at postgresql://u@127.0.0.1")
    assert "pw" not in result.stderr.replace("PostgreSQL", "")


def test_unreachable_temporal_names_the_address(postgres_url):
    address = f"127.0.0.1:{free_port()}"
    result = pressroom("worker", env={"TEMPORAL_ADDRESS": address, "DATABASE_URL": postgres_url})
    assert_one_line_error(result, f"cannot connect to Temporal at {address}")


def test_migrate_applies_then_reports_up_to_date(postgres_server):
    url = postgres_server.url  # the server's own "postgres" database, not the test one
    first = pressroom("migrate", env={"DATABASE_URL": url})
    second = pressroom("migrate", env={"DATABASE_URL": url})
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "up to date" in second.stdout


@pytest.fixture
def stack_env(tmp_path):
    ports = {name: str(free_port()) for name in ("POSTGRES", "TEMPORAL", "UI", "SIMULATOR")}
    env = {f"PRESSROOM_DEV_{name}_PORT": port for name, port in ports.items()}
    env["PRESSROOM_HOME"] = str(tmp_path / "home")
    yield env, ports
    dev_down_and_forget(env)


@pytest.mark.slow
def test_dev_up_brings_up_the_stack_and_down_stops_it(stack_env):
    env, ports = stack_env
    up = pressroom("dev", "up", env=env, timeout=120)
    assert up.returncode == 0, up.stderr
    assert "started  PostgreSQL" in up.stdout and "started  Temporal" in up.stdout
    assert f"http://localhost:{ports['UI']}" in up.stdout
    assert httpx.get(f"http://127.0.0.1:{ports['UI']}/", timeout=10).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{ports['SIMULATOR']}/_sim/stats", timeout=10).status_code == 200

    again = pressroom("dev", "up", env=env, timeout=60)
    assert again.returncode == 0 and "running  PostgreSQL (already)" in again.stdout

    # Commands find the stack without any variable set, and the schema is already there.
    assert "up to date" in pressroom("migrate", env=env).stdout
    exports = pressroom("dev", "env", env=env).stdout
    assert f"export TEMPORAL_ADDRESS=127.0.0.1:{ports['TEMPORAL']}" in exports
    assert "export MAILGUN_API_KEY=sim-" in exports
    assert "export PRESSROOM_FROM_ADDRESS='Pressroom <noreply@example.com>'" in exports  # its site's sender

    down = pressroom("dev", "down", env=env)
    assert "stopped" in down.stdout and "PostgreSQL" in down.stdout
    assert "nothing was running" in pressroom("dev", "down", env=env).stdout
    assert_one_line_error(pressroom("dev", "env", env=env), "not running")


def test_dev_up_names_a_port_already_in_use(stack_env):
    import socket

    env, ports = stack_env
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", int(ports["POSTGRES"])))
        blocker.listen()
        result = pressroom("dev", "up", env=env)
    assert_one_line_error(result, f"port {ports['POSTGRES']}", "PostgreSQL", "already in use")
