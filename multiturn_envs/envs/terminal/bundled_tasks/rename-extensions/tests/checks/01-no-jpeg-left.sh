# name: no .jpeg left
! ls photos | grep -q '\.jpeg$'
