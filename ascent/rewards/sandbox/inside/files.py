"""A run's files: memfds for its stdio, the compiled binary it leaves, and removing the rest.

The zygote reads a run's output back through descriptors it created, never by path, and deletes
whatever a run wrote without recursion, so a directory tree of any depth, or one a run made
unreadable, cannot break the cleanup.
"""

import fcntl
import os
import stat


def memfd(name):
    return os.memfd_create(name, os.MFD_CLOEXEC)


def sealed_memfd(data):
    """An in-memory executable nobody can modify: the compiled program, kept by the zygote."""
    fd = os.memfd_create("main", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    write_all(fd, data)
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def read_back(fd, limit, tail=False):
    """Up to `limit` bytes of a run's memfd (its head, or its tail) in a fresh bytearray (to be
    zeroed once sent), and the memfd's full size."""
    size = os.fstat(fd).st_size
    offset = size - limit if tail and size > limit else 0
    buffer = bytearray(min(limit, size - offset))
    done = 0
    while done < len(buffer):
        got = os.preadv(fd, [memoryview(buffer)[done:]], offset + done)
        if not got:
            del buffer[done:]
            break
        done += got
    return buffer, size


def read_into(fd, limit):
    """What a pipe holds until its end (at most `limit` bytes), in a bytearray."""
    buffer = bytearray(limit)
    done = 0
    while done < limit:
        got = os.readv(fd, [memoryview(buffer)[done:]])
        if not got:
            break
        done += got
    del buffer[done:]
    return buffer


def read_kept(path):
    """The compiler's output, if it is a regular file (never block on whatever else it is)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return read_all(fd, 1 << 40)
    finally:
        os.close(fd)


def remove_tree(path):
    """Delete a file or a directory tree of any depth and modes, without recursion.

    Descends with directory descriptors (a path 3000 levels deep is too long to name) and climbs
    back through '..'; only the names on the way down are kept.
    """
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    names = []
    while True:
        os.fchmod(fd, 0o700)  # a run may have made its directories unreadable
        subdir = None
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    subdir = entry.name
                    break
                os.unlink(entry.name, dir_fd=fd)
        if subdir is not None:
            child = os.open(subdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
            names.append(subdir)
            continue
        if not names:
            os.close(fd)
            os.rmdir(path)
            return
        parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = parent
        os.rmdir(names.pop(), dir_fd=fd)


def read_all(fd, limit):
    chunks = []
    while limit > 0:
        chunk = os.read(fd, min(limit, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
