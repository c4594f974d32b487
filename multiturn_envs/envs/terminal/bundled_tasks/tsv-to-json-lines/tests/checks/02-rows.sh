# name: rows
python3 -I - <<'EOF'
import json
rows=[json.loads(l) for l in open('events.jsonl') if l.strip()]
assert rows == [{'ts': 1, 'user': 'ann', 'action': 'login'}, {'ts': 5, 'user': 'bob', 'action': 'view page'}, {'ts': 9, 'user': 'ann', 'action': 'logout'}], rows
EOF
