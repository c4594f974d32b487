# name: indentation kept
grep -q '^    return a + b$' src/util.py
