# name: valid json
python3 -I -c 'import json; json.load(open("config.json"))'
