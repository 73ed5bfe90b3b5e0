"""Compares two folders written by scripts/gen_dump.cpp file by file as C++ token streams (white space
and comments aside) and prints each kind of difference once, with how many times it occurs and a
file that has it: python3 scripts/compare_generated.py BEFORE_DIR AFTER_DIR"""
import collections
import difflib
import os
import re
import sys

TOKEN = re.compile(r'//[^\n]*|"(?:\\.|[^"\\])*"|\w+|\S')


def tokens(path):
    with open(path) as f:
        return [t for t in TOKEN.findall(f.read()) if not t.startswith("//")]


def main(before, after):
    kinds, example, same = collections.Counter(), {}, 0
    names = sorted(os.listdir(before))
    missing = sorted(set(names) ^ set(os.listdir(after)))
    for name in names:
        if name in missing:
            continue
        a, b = tokens(os.path.join(before, name)), tokens(os.path.join(after, name))
        if a == b:
            same += 1
            continue
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            if op != "equal":
                kind = (op, " ".join(a[i1:i2])[:300], " ".join(b[j1:j2])[:300])
                kinds[kind] += 1
                example.setdefault(kind, name)
    print(f"identical token streams: {same} of {len(names)}; in one folder only: {missing or 'none'}")
    for kind, count in kinds.most_common():
        print(count, example[kind], kind[0])
        print("   -", kind[1])
        print("   +", kind[2])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
