# A launcher as the main process: it runs the command after its first
# argument and exits with its code. "forward" passes SIGTERM on to the
# command, as torchrun and paddle.distributed.launch do; "keep" catches it
# and does not.
import signal
import subprocess
import sys

mode, argv = sys.argv[1], sys.argv[2:]
child = subprocess.Popen(argv)
if mode == "forward":
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signal.SIGTERM))
else:
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
sys.exit(child.wait())
