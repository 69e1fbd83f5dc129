"""Automation runs skip days on the time-skipping server: a clock of their own."""

from tests.conftest import time_skipping_server_of_its_own

time_skipping_env = time_skipping_server_of_its_own()
