# name: port
python3 -I -c 'import json; c=json.load(open("config.json")); assert c["server"]["port"] == 8081'
