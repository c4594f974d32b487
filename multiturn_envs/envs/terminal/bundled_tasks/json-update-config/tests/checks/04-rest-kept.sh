# name: rest kept
python3 -I -c 'import json; c=json.load(open("config.json")); assert c["server"]["host"] == "0.0.0.0" and c["debug"] is False'
