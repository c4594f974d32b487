# name: rest intact
grep -qx 'user = app' config.ini && test $(wc -l < config.ini) = 5
