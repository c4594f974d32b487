# name: tls
python3 -I -c 'import json; c=json.load(open("config.json")); assert c["server"]["tls"] is True'
