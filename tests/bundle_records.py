"""The records of an exported bundle as tests read them: the run's record lines (``tkbox.bundle.v2``: split across
``records/run-NNNNNN.jsonl`` entries, read in order after the layout is checked), or each record's event."""

from __future__ import annotations

import json
import os

from tkbox_daemon.evidence.verify_stream_layout import run_record_lines


def record_lines(bundle: str | os.PathLike[str]) -> list[bytes]:
    return list(run_record_lines(bundle))


def record_events(bundle: str | os.PathLike[str]) -> list[dict]:
    """Each record's event (type and data), in the run's order."""
    return [json.loads(line)["event"] for line in run_record_lines(bundle)]
