# A DDP trainer on the gloo backend (one rank of a job: RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT), with a plain SIGTERM handler: at the end of
# the step after the signal it saves and exits 0. Its peer's collective
# then fails ("Connection closed by peer") unless the peer stops too. It
# writes $LIFEBOAT_DIR/ready after a few steps, and ckpt-<step>/model.pt
# on SIGTERM.
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

stop = False


def on_term(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
torch.set_num_threads(1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
out = os.environ["LIFEBOAT_DIR"]
step = 0
while True:
    x = torch.randn(8, 4)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # the allreduce: it fails when a peer has left
    opt.step()
    step += 1
    if step == 5:
        open(os.path.join(out, "ready"), "w").close()
    if stop:
        d = os.path.join(out, "ckpt-%d" % step)
        os.makedirs(d, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(d, "model.pt"))
        print("rank", dist.get_rank(), "saved step", step, flush=True)
        sys.exit(0)
