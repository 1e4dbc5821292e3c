#!/usr/bin/env python3
"""test_lua_embed.py -- scripts/lua-embed, the build step that turns
src/backend/lua/*.lua into C strings: includes expanded where they stand
(nested, as often as named), comment and blank lines dropped, a comment
after code kept, C escapes right; a cycle, an unknown or malformed include,
long brackets and a bad script name refused with the file and line.

    tests/test_lua_embed.py scripts/lua-embed
"""
import os
import subprocess
import sys
import tempfile

EMBED = os.path.abspath(sys.argv[1])
failures = 0


def check(what, cond):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}")
    else:
        print(f"ok: {what}")


def write(d, name, text):
    path = os.path.join(d, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def run(*args):
    return subprocess.run([sys.executable, EMBED, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    write(d, "includes/inner.lua", "-- inner: a piece\nlocal x = 1 -- kept\n")
    write(d, "includes/outer.lua", '--- @include "inner"\nx = x + 1\n')
    main = write(d, "s_one.lua",
                 '-- s_one.lua -- header\n\nif a then\n  --- @include "outer"\nend\n'
                 '--- @include "inner"\nreturn "q\\\\z"\n')
    r = run("--expand", main)
    check("expand succeeds", r.returncode == 0)
    check("includes nested, expanded where named, twice",
          r.stdout == 'if a then\nlocal x = 1 -- kept\nx = x + 1\nend\nlocal x = 1 -- kept\nreturn "q\\\\z"\n')
    out = os.path.join(d, "out.h")
    r = run(out, main)
    text = open(out).read() if r.returncode == 0 else ""
    check("header written", r.returncode == 0 and "static const char dlock__lua_s_one[] =" in text)
    check("C escapes: quotes and backslashes", '"return \\"q\\\\\\\\z\\"\\n"' in text)
    check("no comment line reaches the C", "header" not in text and "inner: a piece" not in text)
    before = os.stat(out).st_mtime_ns
    r = run(out, main)
    check("unchanged output is not rewritten", r.returncode == 0 and os.stat(out).st_mtime_ns == before)

    write(d, "includes/a.lua", '--- @include "b"\n')
    write(d, "includes/b.lua", '--- @include "a"\n')
    r = run("--expand", write(d, "cyc.lua", '--- @include "a"\n'))
    check("a cycle is refused", r.returncode == 1 and "include cycle" in r.stderr)
    r = run("--expand", write(d, "unk.lua", 'x = 1\n--- @include "nosuch"\n'))
    check("an unknown include is refused, with its line", r.returncode == 1 and "unk.lua:2" in r.stderr)
    r = run("--expand", write(d, "bad.lua", '--- @include nosuch\n'))
    check("a malformed include is refused", r.returncode == 1 and "malformed include" in r.stderr)
    r = run("--expand", write(d, "long.lua", 'local s = [[\n-- not a comment\n]]\n'))
    check("long brackets are refused", r.returncode == 1 and "long brackets" in r.stderr)
    r = run(out, write(d, "Bad-Name.lua", "x = 1\n"))
    check("a bad script name is refused", r.returncode == 1 and "[a-z0-9_]+.lua" in r.stderr)

sys.exit(1 if failures else 0)
