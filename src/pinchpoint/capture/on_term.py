"""SIGTERM keeps what was captured: torchrun ends the other ranks with SIGTERM when one fails (a hung
collective's timeout), schedulers end jobs with it, and the default action skips `atexit`, so a
rank's last step and its stack samples were lost — the very rank a hang report must name.

Installed only where the program has no handler of its own (the default action). When SIGTERM comes
and pinchpoint's handler is still the one installed, it flushes pinchpoint's recordings and ends the
process by the default action, as it would have ended. When the program installed a handler later that
calls this one (Lightning chains earlier handlers), it does nothing: the program decides, and its
exit runs `atexit` as usual.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType


def flush_on_term(*flushers: Callable[[], None]) -> bool:
    """Install the handler (main thread, default action only); True when installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return False

        def on_term(signum: int, frame: FrameType | None) -> None:
            if signal.getsignal(signal.SIGTERM) is not on_term:
                return  # (another handler calls this one: the program decides what SIGTERM does)
            for flush in flushers:
                with contextlib.suppress(Exception):
                    flush()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        def in_child() -> None:  # (a forked DataLoader worker ends as it always did)
            if signal.getsignal(signal.SIGTERM) is on_term:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)

        signal.signal(signal.SIGTERM, on_term)
        os.register_at_fork(after_in_child=in_child)
    except (ValueError, OSError):
        return False
    return True
