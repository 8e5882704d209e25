"""How a lab run directory is told from an engine run's, without torch: a daemon or verify-range asks
this of every run it is given, and only a lab run's replay needs torch (run.lab_run imports it)."""

from __future__ import annotations

from pathlib import Path

from p2paudit.errors import InputError
from p2paudit.run.manifest import MANIFEST_FILE, MAX_MANIFEST_BYTES, MAX_MANIFEST_STRUCTURE
from p2paudit.run.storage import parse_json, read_file

LAB_FORMAT = "p2paudit-lab-run"
SCRIPT_FILE = "script.py"
TRACES_DIR = "lab-traces"
BATCHES_DIR = "lab-batches"


def manifest_format(run_dir: Path) -> object:
    """The "format" field of the run's manifest.json, unverified and nothing loaded (None when the body is
    no JSON object): which reader to open the run with. That reader checks the signature."""
    blob = read_file(run_dir / MANIFEST_FILE, "manifest", MAX_MANIFEST_BYTES, run_dir)
    body = parse_json(blob, str(run_dir), MAX_MANIFEST_STRUCTURE)
    return body.get("format") if isinstance(body, dict) else None


def is_lab_run(run_dir: Path) -> bool:
    """Whether the run directory holds a lab run: it has the lab's files (script.py, lab-traces/) and its
    manifest's format says so. False when it has no readable manifest (the engine's reader then says why);
    an engine run's manifest, which can be large, is not read here at all."""
    if not ((run_dir / SCRIPT_FILE).is_file() and (run_dir / TRACES_DIR).is_dir()):
        return False
    try:
        return manifest_format(run_dir) == LAB_FORMAT
    except InputError:
        return False
