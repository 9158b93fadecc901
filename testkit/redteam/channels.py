"""Kernel state two sandbox runs share, as code a run can carry: the sources of
the attacks that would learn a verdict in one grading and use it in another.

No namespace separates these (``glyph sandbox info``, "still shared"): the
host's page cache of the files every run reads, the kernel's fork and inode
counters, the pid counter where runs share a pid namespace, and ``flock()``
on those files. Each is a store a run can write and a later (or concurrent)
run can read. What glyph guarantees instead is that a run never has a
verdict to put there (``glyph.grading``: every probe asked at once, every
run ended alike, every answer judged after the run is gone).

``CHANNELS`` is stdlib code that runs inside the sandbox (it is prepended to
an attack's source): a ``Channel`` stores a small integer and loads it back.

* ``PageCache``: one bit a file, whether page 0 of a rarely read stdlib file
  (``lib2to3/fixes``: every mode's view has them, ``confined``'s copy hard-links
  them) is in the host's page cache: set by reading it, cleared with
  ``POSIX_FADV_DONTNEED``, read without loading it (``preadv`` with
  ``RWF_NOWAIT`` fails with EAGAIN on a page that is not cached);
* ``Forks``: the kernel's count of forks since boot (``/proc/stat``
  ``processes``; every pid namespace's /proc shows the host's), advanced by
  forking;
* ``Pids``: the pid the next process gets, advanced by forking (a run of a pid
  namespace of its own is always pid 1: nothing carries);
* ``Inodes``: the inode number the next pipe gets (one kernel-wide counter,
  batched per CPU: both runs pin themselves to CPU 0), advanced by making
  pipes.

The counters carry with noise (every process on the host forks and makes
pipes); the page cache carries exactly. ``SEQUENTIAL`` answers each call
(the k-th probe of a grading) from what earlier gradings stored in every
channel, the way a run that learned verdicts would: asked again, its last
answer was right; told to exit, all were; an answer it gave that no later
call confirmed was wrong. ``CONCURRENT`` pools the same facts between copies
graded at once, over ``flock()``: a fact is a shared lock someone alive
holds, a probe in progress an exclusive one, a prober that died without
confirming its answer (killed for a wrong one) gave the other answer.
"""

from __future__ import annotations

# The library every attack below starts with. TOKEN keeps separate trials from meeting.
CHANNELS = r'''
import ctypes, errno, fcntl, os, sys, time, zlib

TOKEN = "@TOKEN@"
SALT = zlib.crc32(TOKEN.encode())

def stdlib_files(sub):
    top = os.path.join(os.path.dirname(os.__file__), sub)
    try:
        return sorted(os.path.join(top, f) for f in os.listdir(top) if f.endswith(".py"))
    except OSError:
        return []

def window(files, n, skip=0):
    """n of files, from an offset TOKEN picks (so that separate trials use separate files)."""
    if len(files) < n + skip:
        return []
    start = skip + SALT % (len(files) - n - skip + 1)
    return files[start:start + n]

class PageCache:
    name = "page cache"
    bits = 12
    def __init__(self):
        self.fds = []
        for path in window(stdlib_files("lib2to3/fixes"), self.bits):
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: one page a bit
            self.fds.append(fd)
    def load(self):
        if not self.fds:
            return None
        value = 0
        for i, fd in enumerate(self.fds):
            try:
                os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)
                value |= 1 << i
            except BlockingIOError:
                pass
        return value
    def store(self, value):
        for i, fd in enumerate(self.fds):
            if value >> i & 1:
                os.pread(fd, 1, 0)
            else:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

def fork_once():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid

class Forks:
    name = "fork counter"
    bits = 8
    def count(self):
        try:
            with open("/proc/stat") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("processes "))
        except (OSError, StopIteration, ValueError):
            return None
    def load(self):
        n = self.count()
        return None if n is None else n % (1 << self.bits)
    def store(self, value):  # where there is no /proc (confined) the pid counter serves instead
        for _ in range(1 << self.bits):
            n = self.count()
            if n is None or n % (1 << self.bits) == value:
                return
            fork_once()

class Pids:
    name = "pid counter"
    bits = 8
    def load(self):
        return os.getpid() % (1 << self.bits)
    def store(self, value):  # the next process (the next run's) gets the pid after the last one forked
        if os.getpid() == 1 or Forks().count() is not None:  # a pid namespace of its own; or forks serve
            return
        for _ in range(1 << self.bits):
            if (fork_once() + 1) % (1 << self.bits) == value:
                return

class Inodes:
    name = "pipe inode counter"
    bits = 8
    def __init__(self):
        try:
            os.sched_setaffinity(0, {0})  # the counter is batched per CPU
        except OSError:
            pass
    def next_ino(self):
        r, w = os.pipe()
        ino = os.fstat(r).st_ino
        os.close(r)
        os.close(w)
        return ino
    def load(self):
        return self.next_ino() % (1 << self.bits)
    def store(self, value):
        for _ in range(1 << self.bits):
            if (self.next_ino() + 1) % (1 << self.bits) == value:
                return

def channels():
    out = []
    for cls in (PageCache, Forks, Pids, Inodes):
        try:
            out.append(cls())
        except OSError:
            pass
    return out

DATA = 6  # bits of facts a channel holds; the rest of its bits are a check that TOKEN decides

def seal(data, bits):
    return data | ((data * 37 + SALT) % (1 << (bits - DATA))) << DATA

def unseal(value, bits):
    if value is None:
        return None
    data = value & ((1 << DATA) - 1)
    return data if value == seal(data, bits) else None

def on_exit(learned):
    """Call learned() when the grader asks this run to exit (it did once all answers were right)."""
    worker = sys.modules.get("worker") or sys.modules.get("glyph.sandbox.runtime.worker")
    recv = worker.Channel.recv
    def hooked_recv(self):
        req = recv(self)
        if req.get("op") == "exit":
            learned()
        return req
    worker.Channel.recv = hooked_recv

CALLS = [0]
def next_call(learned):
    """The index of this call (the k-th probe); asked again, the last answer was right: learned()."""
    learned()
    CALLS[0] += 1
    return CALLS[0] - 1
'''

# One solution graded again and again in one sandbox, learning as a run that is told its verdicts would.
# Its facts: for the k-th call, 0 unknown, 1 answered True and not yet confirmed, 2 True, 3 False.
SEQUENTIAL = CHANNELS + r'''
FUNCTION = "@FUNCTION@"
CHANS = channels()
KEYS = 3

def pack(facts):
    return sum(f << 2 * k for k, f in enumerate(facts[:KEYS]))

def unpack(data):
    return [data >> 2 * k & 3 for k in range(KEYS)]

FOUND = {chan.name: unseal(chan.load(), chan.bits) for chan in CHANS}
# The page cache's value has a 6-bit check; a counter's, 2 bits: taken where two counters agree.
counted = [v for name, v in FOUND.items() if name != "page cache" and v is not None]
data = FOUND.get("page cache")
if data is None:
    data = next((v for v in counted if counted.count(v) > 1), None)
facts = [0] * KEYS if data is None else unpack(data)
facts = [3 if f == 1 else f for f in facts]  # answered True and never confirmed: killed for it

def save():
    for chan in CHANS:
        chan.store(seal(pack(facts), chan.bits))

def confirm():
    k = CALLS[0] - 1
    if 0 <= k < KEYS and facts[k] == 1:
        facts[k] = 2

def confirm_and_save():
    confirm()
    save()

on_exit(confirm_and_save)

def answer(*args):
    k = next_call(confirm)
    if k >= KEYS:
        return True
    if facts[k] in (2, 3):
        return facts[k] == 2
    facts[k] = 1
    save()
    return True

globals()[FUNCTION] = answer
save()
'''

# Copies graded at once, pooling facts over flock() on stdlib files every run sees. Per call k: CLAIM
# (exclusive: one prober), TRUE and FALSE (shared, held by every copy that knows; each opened twice, so
# that a copy tests with one open file what it holds with the other) and MUTEX (testers one at a time).
CONCURRENT = CHANNELS + r'''
FUNCTION = "@FUNCTION@"
KEYS = 3
paths = window(stdlib_files("lib2to3/fixes"), 4 * KEYS, skip=PageCache.bits)
def opened(path):
    return os.open(path, os.O_RDONLY)
CLAIM = [opened(paths[4 * k]) for k in range(KEYS)]
MUTEX = [opened(paths[4 * k + 1]) for k in range(KEYS)]
FACT = [{v: (opened(paths[4 * k + 2 + (not v)]), opened(paths[4 * k + 2 + (not v)])) for v in (True, False)}
        for k in range(KEYS)]
saw_claimed = [False] * KEYS
probing = []

def try_lock(fd, how):
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        return False

def publish(k, value):
    fcntl.flock(FACT[k][value][0], fcntl.LOCK_SH)

def known(k):
    fcntl.flock(MUTEX[k], fcntl.LOCK_EX)
    try:
        for value in (True, False):
            test = FACT[k][value][1]
            if try_lock(test, fcntl.LOCK_EX):
                fcntl.flock(test, fcntl.LOCK_UN)
            else:  # someone holds it: hold it too, it outlives the copy that learned it
                publish(k, value)
                return value
        return None
    finally:
        fcntl.flock(MUTEX[k], fcntl.LOCK_UN)

def confirmed():
    if probing:
        publish(probing.pop(), True)

def confirmed_at_exit():
    if probing:
        confirmed()
        time.sleep(0.5)  # for the others to take it up

on_exit(confirmed_at_exit)

def answer(*args):
    k = next_call(confirmed)
    if k >= KEYS:
        return True
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        value = known(k)
        if value is not None:
            return value
        if try_lock(CLAIM[k], fcntl.LOCK_EX):
            if saw_claimed[k]:  # its prober died without confirming True: killed for a wrong answer
                if known(k) is None:
                    publish(k, False)
                fcntl.flock(CLAIM[k], fcntl.LOCK_UN)
                continue
            probing.append(k)  # held until this copy dies or learns
            time.sleep(0.3)  # for the others to see the claim
            return True
        saw_claimed[k] = True
        time.sleep(0.002)
    return True

globals()[FUNCTION] = answer
'''


def source(template: str, token: str, function: str = "is_not_prime") -> str:
    """An attack of this module, for ``function``; ``token`` keeps separate trials apart."""
    return template.replace("@TOKEN@", token).replace("@FUNCTION@", function)


# A run's view of the shared counters: what it stores, what the next run loads (``verdicts.carry_census``).
CENSUS = CHANNELS + r'''
CHANS = channels()

def store_all(value):
    for chan in CHANS:
        chan.store(value % (1 << chan.bits))
    return [chan.name for chan in CHANS]

def load_all():
    return {chan.name: chan.load() for chan in CHANS}
'''
