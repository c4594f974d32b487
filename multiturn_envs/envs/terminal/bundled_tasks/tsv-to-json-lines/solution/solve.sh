#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
python3 -c 'import csv, json, sys
for r in csv.DictReader(open("events.tsv"), delimiter="\t"):
    r["ts"] = int(r["ts"])
    print(json.dumps(r))' > events.jsonl
