# name: both replaced
test $(grep -c db.internal config.ini) = 2
