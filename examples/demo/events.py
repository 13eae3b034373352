"""Turns lifeboat's JSON log (stderr) into the lines a person follows in the demo."""
import json
import sys

for line in iter(sys.stdin.readline, ""):  # line by line, as they come
    try:
        e = json.loads(line)
    except ValueError:
        sys.stderr.write(line)
        continue
    m = e.get("msg", "")
    if m == "checkpoint.committed":
        print(f"  lifeboat: committed step {e['step']}: {e['bytes']} bytes, {e['uploaded_bytes']} uploaded, "
              f"{e['deduped_bytes']} already stored, {e['seconds'] * 1000:.0f} ms", flush=True)
    elif m == "supervisor.stopping":
        print(f"  lifeboat: got SIG{e['signal']}, forwarded SIG{e['delivered']}; {e['budget']}", flush=True)
    elif m == "supervisor.child_exited":
        print(f"  lifeboat: {e['status']}", flush=True)
    elif m == "checkpoint.flushed":
        print(f"  lifeboat: final upload of step {e['step']} committed {e['seconds'] * 1000:.0f} ms after the trainer exited", flush=True)
    elif m == "resume.restored":
        print(f"  lifeboat: restored step {e['step']} ({e['bytes']} bytes in {e['seconds'] * 1000:.0f} ms) into {e['dir']}", flush=True)
    elif m == "resume.fresh_start":
        print("  lifeboat: no checkpoint in the store yet: fresh start", flush=True)
    elif m == "supervisor.exit":
        print(f"  lifeboat: exiting with code {e['code']}", flush=True)
    elif e.get("level") in ("WARN", "ERROR"):
        print(f"  lifeboat {e['level']}: {m} {e}", flush=True)
