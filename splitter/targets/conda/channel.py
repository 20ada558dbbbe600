"""The output channel's repodata: per subdir, and an empty noarch, written from the records
read off the assembled packages, or indexed by py-rattler's index_fs in a subprocess when a
recipe backend built them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from splitter.errors import ExternalToolError
from splitter.tools import die_with_parent


def index_channel(
    channel: Path, subdir: str, records: dict[str, dict[str, object]] | None = None
) -> None:
    """Write repodata.json for `subdir` and noarch: from the records the workers read off the
    packages (channel_record), else with py-rattler's index_fs in a subprocess of its own
    (never in the build's process: a killed build must not leave an indexer writing)."""
    if records is None:
        _index_in_subprocess(channel)
        shutil.rmtree(channel / ".tmp", ignore_errors=True)  # index_fs's scratch directory
    for name in (subdir, "noarch"):
        repodata = channel / name / "repodata.json"
        if records is not None:
            found = records if name == subdir else {}
            data = {"info": {"subdir": name}, "packages": {}, "packages.conda": found}
            data.update(repodata_version=1, v3={})  # as index_fs writes it
        else:
            data = json.loads(repodata.read_text())
            for key in ("packages", "packages.conda"):
                for record in data.get(key, {}).values():
                    # index_fs stamps the wall clock here; the package's own timestamp keeps
                    # the channel reproducible.
                    if "indexed_timestamp" in record:
                        record["indexed_timestamp"] = record.get("timestamp", 0)
        repodata.parent.mkdir(exist_ok=True)
        repodata.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _index_in_subprocess(channel: Path) -> None:
    code = (
        "import asyncio, os, sys\n"
        "from rattler.index import index_fs\n"
        "result = index_fs(sys.argv[1], write_zst=False, write_shards=False)\n"
        "if asyncio.iscoroutine(result):\n"
        "    asyncio.run(result)\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    command = [sys.executable, "-c", code, str(channel)]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, preexec_fn=die_with_parent
    )
    if result.returncode != 0 or not any(channel.glob("*/repodata.json")):
        raise ExternalToolError(
            "py-rattler could not index the channel", command, result.returncode, result.stderr
        )
