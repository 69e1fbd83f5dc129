"""Posts are scheduled by the time-skipping server's clock, and `posts schedule` accepts times up to
2099: the posts tests get a server whose clock the other folders have not skipped ahead."""

from tests.conftest import time_skipping_server_of_its_own

time_skipping_env = time_skipping_server_of_its_own()
