# name: log untouched
test $(wc -l < service.log) = 7
