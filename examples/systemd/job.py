# The scheduled job of stockade-agent-job.service, in its jail: its input is
# /data (read-only: /opt/agent/data on the host, --ro), its output goes to
# /work, its working directory (/var/lib/stockade-agent on the host,
# --workdir: what it writes there is copied back when the run ends).
# Replace it with the agent's own program; this one counts the rows of
# every CSV file in /data and writes the counts to summary.json.
import csv
import json
import pathlib

counts = {}
for path in sorted(pathlib.Path("/data").glob("*.csv")):
    with path.open(newline="") as f:
        counts[path.name] = sum(1 for _ in csv.reader(f))
pathlib.Path("summary.json").write_text(json.dumps(counts, indent=1) + "\n")
print(f"job: {len(counts)} CSV files, {sum(counts.values())} rows; wrote summary.json")
