"""Call-a-function tests (HumanEval style) across a process boundary.

The program and its tests never share an interpreter. The zygote forks two processes:

- the test process, which reads the test code straight from the host's pipe (the zygote never
  holds it, so no later run can find it in memory it inherited), drops to its own uid where the
  sandbox has one, and runs `check(candidate)`;
- the program, which runs as `python main.py` would and then serves calls (`serve`).

`candidate` in the test process is a `Candidate`: each call sends its arguments over a pipe and
waits for the program's answer. Only plain data crosses, as tagged JSON (`pack` / `unpack`), so
whatever the program returns is rebuilt here from built-in types: no object of the program's
with its own `__eq__`, no access to the test's frames, globals, builtins or verdict. The test
process alone writes the verdict, on a pipe only the zygote reads.

Plain Python accepts more than built-in containers, so the program's side normalises: dict
subclasses and other mappings (Counter, defaultdict, OrderedDict) cross as dicts, namedtuples as
tuples, int/str/float subclasses as their base values; Fraction, Decimal, range, deque, bytes,
dict views and iterators (generators, map, zip) are rebuilt as the same kinds of object.
"""

import builtins
import json
import os
import struct
import traceback
from collections import deque
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from decimal import Decimal
from fractions import Fraction

MAX_DEPTH = 200
SMALL_INT = 1 << 63  # larger ints cross in hex: JSON digits are capped at 4300 on decoding
MESSAGE_CHARS = 300


class NotPlainData(TypeError):
    """A value that cannot cross between the program and its tests."""


class ProgramError(Exception):
    """The program failed a call: it raised, ended, or answered with something unusable."""

    raised_by_program = True


class TestCodeError(Exception):
    """The test code itself cannot run here (not the program's fault)."""


# -- plain data ------------------------------------------------------------------------------


def pack(value, depth=0):
    """`value` as JSON-ready data: scalars as themselves, everything else as [tag, *items]."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"a value nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        number = int.__int__(value)
        return number if -SMALL_INT < number < SMALL_INT else ["i", format(number, "x")]
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        return ["c", value.real, value.imag]
    if isinstance(value, (bytes, bytearray)):
        return ["b" if isinstance(value, bytes) else "B", bytes(value).decode("latin-1")]
    if isinstance(value, Fraction):
        return ["Q", format(value.numerator, "x"), format(value.denominator, "x")]
    if isinstance(value, Decimal):
        return ["D", str(value)]
    if isinstance(value, range):
        return ["r", pack(value.start), pack(value.stop), pack(value.step)]
    tag = _container_tag(value)
    if tag is None:
        raise NotPlainData(f"a {type(value).__name__}")
    if tag in "de":
        pairs = value.items() if tag == "d" else value
        return [tag, *(pack(x, depth + 1) for pair in pairs for x in pair)]
    return [tag, *(pack(x, depth + 1) for x in value)]


def _container_tag(value):
    for kind, tag in (
        (tuple, "t"),
        (list, "l"),
        (set, "s"),
        (frozenset, "f"),
        (deque, "q"),
        (Mapping, "d"),
        (KeysView, "k"),
        (ValuesView, "v"),
        (ItemsView, "e"),
        (Iterator, "it"),
    ):
        if isinstance(value, kind):
            return tag
    return None


def unpack(node, depth=0):
    """The value `pack` described, built from built-in types only."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"a value nested more than {MAX_DEPTH} levels deep")
    if node is None or type(node) in (bool, int, float, str):
        return node
    if type(node) is not list or not node or type(node[0]) is not str:
        raise NotPlainData("malformed data")
    tag, rest = node[0], node[1:]
    if tag in SCALARS:
        return SCALARS[tag](*rest)
    items = [unpack(x, depth + 1) for x in rest]
    if tag in "de":
        if len(items) % 2:
            raise NotPlainData("malformed data")
        pairs = list(zip(items[::2], items[1::2], strict=True))
        return dict(pairs) if tag == "d" else dict(pairs).items()
    if tag not in CONTAINERS:
        raise NotPlainData(f"unknown kind {tag!r}")
    return CONTAINERS[tag](items)


def _hex(text):
    if type(text) is not str:
        raise NotPlainData("malformed number")
    return int(text, 16)


SCALARS = {
    "i": _hex,
    "c": lambda re, im: complex(float(re), float(im)),
    "b": lambda text: text.encode("latin-1"),
    "B": lambda text: bytearray(text.encode("latin-1")),
    "Q": lambda n, d: Fraction(_hex(n), _hex(d)),
    "D": lambda text: Decimal(str(text)),
    "r": lambda *args: range(*(unpack(a) for a in args)),
}
CONTAINERS = {
    "t": tuple,
    "l": list,
    "s": set,
    "f": frozenset,
    "q": deque,
    "k": lambda items: dict.fromkeys(items).keys(),
    "v": lambda items: dict(enumerate(items)).values(),
    "it": iter,
}


# -- frames on pipes -------------------------------------------------------------------------


def send(fd, obj):
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd, limit):
    """The next frame as a JSON value; None at end of file; ProgramError when malformed."""
    head = _read(fd, 4)
    if not head:
        return None
    if len(head) < 4:
        raise ProgramError("the program ended in the middle of an answer")
    size = struct.unpack(">I", head)[0]
    if size > limit:
        raise ProgramError(f"the answer is larger than the output limit ({limit} bytes)")
    data = _read(fd, size)
    if len(data) < size:
        raise ProgramError("the program ended in the middle of an answer")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:
        raise ProgramError(f"an answer that is not plain data ({err})") from None


def _read(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


# -- the program's side ----------------------------------------------------------------------


def serve(namespace, entry_point, calls_fd, answers_fd):
    """Answer calls of `entry_point` until the tests are done (end of file on `calls_fd`)."""
    while True:
        try:
            request = receive(calls_fd, 1 << 62)
        except ProgramError:  # the test process was stopped mid-call: the run is over
            return
        if request is None:
            return
        args = unpack(request[0])
        kwargs = {name: unpack(value) for name, value in request[1].items()}
        function = namespace.get(entry_point)
        if not callable(function):
            answer = ["raise", "NameError", f"the program defines no function {entry_point!r}"]
        else:
            answer = _call(function, entry_point, args, kwargs)
        try:
            send(answers_fd, answer)
        except BrokenPipeError:  # the test process is gone: nobody is asking any more
            return


def _call(function, name, args, kwargs):
    try:
        value = function(*args, **kwargs)
    except Exception as err:
        # Hide this frame: the traceback reads as if the test had called the function.
        traceback.print_exception(type(err), err, err.__traceback__.tb_next)
        return ["raise", type(err).__name__, str(err)[:MESSAGE_CHARS]]
    try:
        return ["return", pack(value)]
    except (NotPlainData, RecursionError) as err:
        return ["refuse", f"{name}() returned {err}, which is not plain data"]


# -- the test process ------------------------------------------------------------------------


class Candidate:
    """What the test code calls: a stand-in for the program's function, over two pipes."""

    def __init__(self, name, calls_fd, answers_fd, limit):
        self.__name__ = name
        self.calls_fd, self.answers_fd, self.limit = calls_fd, answers_fd, limit

    def __call__(self, *args, **kwargs):
        try:
            request = [pack(args), {k: pack(v) for k, v in kwargs.items()}]
        except NotPlainData as err:
            raise TestCodeError(f"the tests pass {err} to {self.__name__}()") from None
        try:
            send(self.calls_fd, request)
        except BrokenPipeError:
            raise ProgramError(f"the program ended before {self.__name__}() was called") from None
        answer = receive(self.answers_fd, self.limit)
        if answer is None:
            raise ProgramError(f"the program ended before {self.__name__}() returned")
        try:
            kind, *rest = answer
            if kind == "return":
                return unpack(rest[0])
            failure = _rebuilt(*map(str, rest)) if kind == "raise" else ProgramError(str(rest[0]))
        except (NotPlainData, TypeError, ValueError, IndexError, RecursionError) as err:
            raise ProgramError(f"{self.__name__}() answered with unusable data ({err})") from None
        raise failure


def _rebuilt(name, message):
    """The program's exception as the built-in type of that name, else a ProgramError."""
    kind = getattr(builtins, name, None)
    err = None
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            err = kind(message)
        except Exception:
            err = None
    if err is None:
        err = ProgramError(f"{name}: {message}")
    err.raised_by_program = True
    return err


def run_tests(tests, entry_point, calls_fd, answers_fd, limit):
    """Run the test code against the program; the verdict as {"outcome", "message"}.

    outcome: passed; failed (an assertion); error (the program raised, ended or answered with
    something unusable, or the tests broke on what it returned); test_error (the test code
    itself cannot run: a syntax error, a name it never defines, no check function).
    """
    candidate = Candidate(entry_point, calls_fd, answers_fd, limit)
    namespace = {"__name__": "__tests__", "__builtins__": builtins}
    try:
        if tests.get("setup"):
            exec(compile(tests["setup"], "setup.py", "exec", dont_inherit=True), namespace)
        namespace[entry_point] = candidate  # tests may call the function by its own name
        exec(compile(tests["test"], "tests.py", "exec", dont_inherit=True), namespace)
        check = namespace.get("check")
        if not callable(check):
            raise TestCodeError("the test code defines no check(candidate) function")
        check(candidate)
    except AssertionError as err:
        return _verdict("failed", err)
    except (TestCodeError, SyntaxError) as err:
        return _verdict("test_error", err)
    except NameError as err:
        if getattr(err, "raised_by_program", False):
            return _verdict("error", err)
        hint = " (pass the problem's prompt as test_setup when its tests call its helpers)"
        return _verdict("test_error", err, hint)
    except Exception as err:
        return _verdict("error", err)
    return {"outcome": "passed", "message": ""}


def _verdict(outcome, err, hint=""):
    line = traceback.format_exception_only(type(err), err)[-1].strip()
    return {"outcome": outcome, "message": line[:MESSAGE_CHARS] + hint}
