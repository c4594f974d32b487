# name: no trailing whitespace
! grep -q '[[:blank:]]$' src/util.py
