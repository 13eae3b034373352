# A DDP trainer on the gloo backend (one rank of a job: RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT). It writes $LIFEBOAT_DIR/ready after a few
# steps and saves ckpt-<step>/model.pt (the model and the step):
#   - every SAVE_EVERY steps when set (periodic saves, far more often than
#     lifeboat's --settle);
#   - MODE=handler (the default): with a plain SIGTERM handler, at the end
#     of the step after the signal (with SAVE_EVERY, of the first step
#     after it that is not a periodic one, so that the SIGTERM save is
#     always newer than the peers' last periodic save, as it most often
#     is), then exits 0. Its peer's collective then fails ("Connection
#     closed by peer") unless the peer stops too;
#   - MODE=stopstep: once lifeboat.stop_requested(), it asks
#     lifeboat.stop_step() for the step every rank saves, trains up to it,
#     saves it and exits 0 (images/lifeboat.py on PYTHONPATH).
# Each step sleeps STEP_SECONDS (0). With RESUME_ONLY set, it prints what
# lifeboat restored ("resumed <LIFEBOAT_RESUME_STEP> <the saved step>", or
# "fresh") and exits 0 without joining the job.
import os
import signal
import sys
import time

import torch

out = os.environ["LIFEBOAT_DIR"]
if os.environ.get("RESUME_ONLY"):
    d = os.environ.get("LIFEBOAT_RESUME_DIR")
    if not d:
        print("fresh", flush=True)
    else:
        saved = torch.load(os.path.join(d, "model.pt"))
        print("resumed", os.environ["LIFEBOAT_RESUME_STEP"], saved["step"], flush=True)
    sys.exit(0)

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

mode = os.environ.get("MODE", "handler")
every = int(os.environ.get("SAVE_EVERY", "0"))
pause = float(os.environ.get("STEP_SECONDS", "0"))
stop = False

if mode == "stopstep":
    import lifeboat

    lifeboat.install_stop_handler()
else:

    def on_term(signum, frame):
        global stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)


def save(step):
    d = os.path.join(out, "ckpt-%d" % step)
    os.makedirs(d, exist_ok=True)
    torch.save({"model": model.module.state_dict(), "step": step}, os.path.join(d, "model.pt"))


step = 0
target = None
while True:
    x = torch.randn(8, 4)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # the allreduce: it fails when a peer has left
    opt.step()
    step += 1
    if step == 5:
        open(os.path.join(out, "ready"), "w").close()
    if every and step % every == 0:
        save(step)
    if mode == "stopstep" and target is None and lifeboat.stop_requested():
        target = lifeboat.stop_step(step)
    # A handler's save lands between two periodic ones.
    handler_save = stop and not (every and step % every == 0)
    if handler_save or target is not None and step >= target:
        save(step)
        print("rank", dist.get_rank(), "saved step", step, flush=True)
        sys.exit(0)
    time.sleep(pause)
