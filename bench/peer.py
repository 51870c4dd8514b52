"""A separate virtualenv with yacron 0.19.0, to time its cron engine as a peer.

yacron's schedules are evaluated by the ``crontab`` package (parse-crontab),
which yacron 0.19.0 pins; installing yacron brings exactly that version.  It
lives in its own venv so that it never leaks into cronstable's environment.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

PEER_DIR = pathlib.Path(__file__).resolve().parent / ".venv-yacron"
YACRON = "yacron==0.19.0"


def _python(venv: pathlib.Path) -> pathlib.Path:
    if sys.platform == "win32":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def _ready(python: pathlib.Path) -> bool:
    if not python.exists():
        return False
    probe = "import crontab, yacron; from crontab import CronTab"
    return subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0


def ensure_peer_venv() -> pathlib.Path:
    """Create bench/.venv-yacron with yacron 0.19.0 if needed; return its python.

    Raises subprocess.CalledProcessError when the venv or the install fails.
    """
    python = _python(PEER_DIR)
    if _ready(python):
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_DIR)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", YACRON],
        check=True,
    )
    return python


if __name__ == "__main__":
    print(ensure_peer_venv())
