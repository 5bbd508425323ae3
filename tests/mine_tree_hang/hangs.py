import time

import warp as wp


@wp.kernel
def behind_a_hang(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = 2.0


while True:
    time.sleep(0.1)
