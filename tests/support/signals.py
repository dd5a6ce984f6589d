"""Starting a child process that a test will interrupt with SIGINT, as Ctrl-C would.

A shell starts a background job (`make test &`, a CI step, `nohup`) with SIGINT ignored, and
children inherit an ignored signal across exec; Python then leaves it ignored instead of
raising KeyboardInterrupt, so the child never sees the test's Ctrl-C. `Popen`'s
`restore_signals` does not help: it restores only SIGPIPE, SIGXFZ and SIGXFSZ.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """A `preexec_fn` for `subprocess.Popen`: the child starts with SIGINT's default action,
    which a Python child turns into KeyboardInterrupt as it would under a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
