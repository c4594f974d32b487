# name: no localhost left
! grep -q localhost config.ini
