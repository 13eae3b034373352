# A PyTorch trainer as people write it: a DataLoader with worker processes,
# and a SIGTERM handler that saves the model and exits. It writes
# OUT/ready once its workers serve batches, and OUT/saved.pt on SIGTERM.
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

out = sys.argv[1]


class Numbers(Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.tensor([float(i % 100)])


model = torch.nn.Linear(1, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
step = 0


def save_and_exit(signum, frame):
    # A real save takes seconds (the model, the optimizer, the data
    # loader's position): long enough for workers killed by the same
    # SIGTERM to be reaped, and for the DataLoader to raise meanwhile.
    time.sleep(1)
    tmp = os.path.join(out, "saved.pt.tmp")
    torch.save({"step": step, "model": model.state_dict()}, tmp)
    os.replace(tmp, os.path.join(out, "saved.pt"))
    print("saved step", step, flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, save_and_exit)

loader = DataLoader(Numbers(), batch_size=4, num_workers=2)
for x in loader:
    loss = ((model(x) - x) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step == 5:
        open(os.path.join(out, "ready"), "w").close()
