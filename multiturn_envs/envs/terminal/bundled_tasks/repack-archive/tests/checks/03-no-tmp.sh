# name: no tmp
! unzip -Z1 data.zip | grep -q '\.tmp$'
