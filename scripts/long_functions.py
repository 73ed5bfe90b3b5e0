#!/usr/bin/env python3
"""Lists functions of src/ longer than a limit (default 150 lines): a definition opens at the start
of a line (a namespace-level function, or a member defined out of class) and ends at the first '}'
at the start of a line after it. Lambdas count as part of their function. Exit 1 when any is over.

    scripts/long_functions.py [--limit N] [paths...]
"""
import argparse
import pathlib
import re
import sys

START = re.compile(r'^(?!namespace|struct|class|enum|union|extern|using|typedef|#|//|\s)([^;{}=]*\))\s*(const\s*)?(override\s*)?(noexcept\s*)?(->\s*[^{]+)?\{\s*$')


RAW = re.compile(r'R"([^(\s]*)\((.*?)\)\1"', re.S)


def functions(path):
    # raw string literals (kernels held as text) count as lines of their function, but their braces
    # do not end it
    text = RAW.sub(lambda m: 'R""' + '\n' * m.group(0).count('\n'), path.read_text(errors='replace'))
    lines = text.split('\n')
    i = 0
    while i < len(lines):
        line = lines[i]
        # a signature may span lines: join until the line that ends with '{'
        if line and not line[0].isspace() and '(' in line and not line.startswith(('}', '#', '//')):
            j = i
            sig = line
            while not sig.rstrip().endswith('{') and j + 1 < len(lines) and j - i < 6 and not sig.rstrip().endswith(';'):
                j += 1
                sig += ' ' + lines[j].strip()
            if sig.rstrip().endswith('{') and START.match(sig.replace('\n', ' ')):
                k = j + 1
                while k < len(lines) and not lines[k].startswith('}'):
                    k += 1
                name = re.sub(r'\s+', ' ', sig.split('(')[0]).split(' ')[-1]
                yield name, i + 1, k - i + 1
                i = k + 1
                continue
        i += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--limit', type=int, default=150)
    ap.add_argument('paths', nargs='*', default=['src'])
    a = ap.parse_args()
    over = []
    for root in a.paths:
        for p in sorted(pathlib.Path(root).rglob('*.cpp')):
            for name, line, n in functions(p):
                if n > a.limit:
                    over.append((n, f'{p}:{line}', name))
    for n, where, name in sorted(over, reverse=True):
        print(f'{n:5d}  {where}  {name}')
    print(f'{len(over)} function(s) over {a.limit} lines', file=sys.stderr)
    return 1 if over else 0


if __name__ == '__main__':
    sys.exit(main())
