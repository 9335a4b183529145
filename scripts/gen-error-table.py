#!/usr/bin/env python3
"""Prints the markdown table of umdResult codes (name, value, meaning, action) from
umd/src/error/codes.rs, for docs/libumd.md. umd/tests/error_codes_golden.rs checks that the
document has a row for every code."""
import re, pathlib
root = pathlib.Path(__file__).resolve().parent.parent
s = (root / "umd/src/error/codes.rs").read_text()
vals = dict(re.findall(r'(UMD_\w+) = (-?\d+),', s))
rows = re.findall(r'umdResult::(\w+) => \{?\s*\(\s*c"\w+",\s*c"([^"]*)",\s*(\w+),?\s*\)', s)
print("| code | value | meaning | caller action |\n|---|---|---|---|")
for name, text, action in rows:
    act = action.replace("UMD_ACTION_", "").lower().replace("_", " ")
    print(f"| `{name}` | {vals[name]} | {text} | {act} |")
