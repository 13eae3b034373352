"""A toy trainer with the SIGTERM handler most teams hand-write.

It counts steps, and on SIGTERM saves its step to a file and exits 0 -- which
is exactly what makes a Kubernetes Job look "Completed" after a preemption.
Lifeboat turns that exit 0 into 143 so the Job is retried.
"""
import os
import signal
import sys
import time

out = os.environ.get("DEMO_OUT", ".")
step = 0


def on_term(signum, frame):
    path = os.path.join(out, "saved_step")
    with open(path, "w") as f:
        f.write(str(step))
    print(f"trainer: got signal {signum} at step {step}; saved {path}; exiting 0", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
print(f"trainer: pid {os.getpid()}, process group {os.getpgrp()}", flush=True)
while True:
    step += 1
    if step % 10 == 0:
        print(f"trainer: step {step}", flush=True)
    time.sleep(0.05)
