"""The bundled tasks of MT/Terminal-v0: written for this project in Terminal-Bench's style.

Each task lives in ``/app``, needs no network, and comes with hidden checks (bash, run by the
checker on a copy of ``/app``) and a reference solution (one command per turn, re-runnable).
Several checks build inputs of their own that the agent never saw (a second data file, other
arguments), so a solution must do the job, not just write the expected text. CI runs every
reference solution and an empty submission against the checks
(``tests/envs/terminal/test_bundled_tasks.py``).
"""

from __future__ import annotations

from functools import cache

from multiturn_envs.envs.terminal.checker import Check
from multiturn_envs.envs.terminal.tasks import TerminalTask

# Fixed git identity and dates, so a task's repository is the same in every run.
_GIT = (
    "export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.invalid "
    "GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.invalid "
    "GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'\n"
    "git config --global user.name dev && git config --global user.email dev@example.invalid\n"
    "git config --global init.defaultBranch main\n"
)


def _t(
    task_id: str,
    category: str,
    difficulty: str,
    instruction: str,
    checks: dict[str, str],
    solution: list[str],
    files: dict[str, str] | None = None,
    setup: str = "",
) -> TerminalTask:
    return TerminalTask(
        task_id=task_id,
        instruction=instruction,
        checks=tuple(Check(name, script) for name, script in checks.items()),
        solution=tuple(solution),
        files=files or {},
        setup=setup,
        category=category,
        difficulty=difficulty,
    )


LOG = """\
2024-05-01 10:00:01 INFO service started
2024-05-01 10:00:05 ERROR disk quota exceeded
2024-05-01 10:01:00 WARN slow response
2024-05-01 10:02:13 ERROR connection reset
2024-05-01 10:03:00 INFO heartbeat
2024-05-01 10:04:42 ERROR timeout talking to db
2024-05-01 10:05:00 INFO heartbeat
"""

ACCESS_LOG = (
    "\n".join(
        f"10.0.0.{i % 7} - - [01/May/2024:10:{i:02d}:00 +0000] "
        f'"GET /p{i % 5} HTTP/1.1" {code} {100 + i}'
        for i, code in enumerate(
            [200, 200, 404, 200, 500, 301, 200, 404, 200, 200, 500, 200, 301, 200, 404, 200]
        )
    )
    + "\n"
)


def _tasks() -> list[TerminalTask]:
    t = [
        # ---------------------------------------------------------------- text and files
        _t(
            "count-errors",
            "text",
            "easy",
            "Count the lines of /app/service.log that contain the word ERROR and write just "
            "that number to /app/error_count.txt.",
            {
                "count file exists": "test -f error_count.txt",
                "count is right": 'test "$(tr -d " \\n" < error_count.txt)" = 3',
                "log untouched": "test $(wc -l < service.log) = 7",
            },
            ["grep -c ERROR service.log > error_count.txt"],
            files={"service.log": LOG},
        ),
        _t(
            "unique-sorted-words",
            "text",
            "easy",
            "/app/words.txt has one word per line, with repeats. Write the distinct words, "
            "sorted alphabetically, one per line, to /app/unique.txt.",
            {
                "unique.txt exists": "test -f unique.txt",
                "content": "printf 'apple\\nbanana\\ncherry\\nkiwi\\n' | diff - unique.txt",
            },
            ["sort -u words.txt > unique.txt"],
            files={"words.txt": "kiwi\napple\nbanana\napple\ncherry\nkiwi\nbanana\napple\n"},
        ),
        _t(
            "replace-host",
            "text",
            "easy",
            "In /app/config.ini, replace every occurrence of `localhost` with `db.internal`, "
            "editing the file in place.",
            {
                "no localhost left": "! grep -q localhost config.ini",
                "both replaced": "test $(grep -c db.internal config.ini) = 2",
                "rest intact": "grep -qx 'user = app' config.ini && test $(wc -l < config.ini) = 5",
            },
            ["sed -i 's/localhost/db.internal/g' config.ini"],
            files={
                "config.ini": "[db]\nhost = localhost\nuser = app\n"
                "[cache]\nurl = redis://localhost:6379\n"
            },
        ),
        _t(
            "line-slice",
            "text",
            "easy",
            "Write lines 10 to 20 (inclusive) of /app/numbers.txt to /app/slice.txt.",
            {
                "slice.txt exists": "test -f slice.txt",
                "content": "seq 109 119 | diff - slice.txt",
            },
            ["sed -n '10,20p' numbers.txt > slice.txt"],
            setup="seq 100 200 > numbers.txt",
        ),
        _t(
            "strip-trailing-space",
            "text",
            "easy",
            "Remove the trailing whitespace (spaces and tabs) at the end of every line of "
            "/app/src/util.py, in place, without changing anything else.",
            {
                "no trailing whitespace": "! grep -q '[[:blank:]]$' src/util.py",
                "same lines": "test $(wc -l < src/util.py) = 6",
                "still python": "python3 -c \"import ast; ast.parse(open('src/util.py').read())\"",
                "indentation kept": "grep -q '^    return a + b$' src/util.py",
            },
            ["sed -i 's/[[:blank:]]*$//' src/util.py"],
            files={
                "src/util.py": "def add(a, b):   \n    return a + b\t\n\n"
                "def sub(a, b):\n    return a - b  \n# end \t \n"
            },
        ),
        _t(
            "dedupe-keep-order",
            "text",
            "easy",
            "/app/hosts.txt lists host names, some more than once. Write each host once, in "
            "the order of its first appearance, to /app/dedup.txt.",
            {
                "dedup.txt exists": "test -f dedup.txt",
                "content": "printf 'web1\\ndb1\\nweb2\\ncache1\\n' | diff - dedup.txt",
            },
            ["awk '!seen[$0]++' hosts.txt > dedup.txt"],
            files={"hosts.txt": "web1\ndb1\nweb1\nweb2\ndb1\ncache1\nweb2\n"},
        ),
        _t(
            "merge-parts-in-order",
            "text",
            "medium",
            "/app/parts/ holds part1.txt ... part12.txt. Concatenate them in NUMERIC order "
            "(part1, part2, ..., part12) into /app/full.txt.",
            {
                "full.txt exists": "test -f full.txt",
                "numeric order": 'for i in $(seq 1 12); do echo "chunk $i"; done | diff - full.txt',
            },
            ["cat $(ls parts/part*.txt | sort -V) > full.txt"],
            setup="mkdir -p parts && for i in $(seq 1 12); do "
            'echo "chunk $i" > parts/part$i.txt; done',
        ),
        _t(
            "word-frequency",
            "text",
            "medium",
            "Find the three most frequent words in /app/speech.txt (case-insensitive, words are "
            "runs of letters) and write them to /app/top3.txt, one per line as `word count`, "
            "most frequent first, words in lower case.",
            {
                "top3.txt exists": "test -f top3.txt",
                "content": "printf 'the 6\\nwe 4\\nshall 3\\n' | diff - top3.txt",
            },
            [
                "tr -cs 'A-Za-z' '\\n' < speech.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort "
                "| uniq -c | sort -k1,1nr -k2,2 | head -3 | awk '{print $2, $1}' > top3.txt"
            ],
            files={
                "speech.txt": "We shall fight on the beaches. We shall fight on the landing "
                "grounds; the fields, the streets, the hills.\nWe shall never surrender, "
                "we the people.\n"
            },
        ),
        _t(
            "find-large-files",
            "files",
            "medium",
            "List every regular file under /app/data that is larger than 1 KiB (1024 bytes), as "
            "paths relative to /app (like data/x/y.bin), sorted, one per line, in "
            "/app/big.txt.",
            {
                "big.txt exists": "test -f big.txt",
                "content": "printf 'data/a/big1.bin\\ndata/b/c/big2.bin\\ndata/big3.log\\n' "
                "| diff - big.txt",
            },
            ["find data -type f -size +1024c | sort > big.txt"],
            setup=(
                "mkdir -p data/a data/b/c && head -c 2000 /dev/zero > data/a/big1.bin && "
                "head -c 100 /dev/zero > data/a/small.bin && head -c 5000 /dev/zero > "
                "data/b/c/big2.bin && head -c 1024 /dev/zero > data/b/exact.bin && "
                "head -c 3000 /dev/zero > data/big3.log && echo hi > data/tiny.txt"
            ),
        ),
        _t(
            "rename-extensions",
            "files",
            "easy",
            "Rename every file in /app/photos ending in .jpeg so it ends in .jpg instead "
            "(keep the rest of each name and the contents).",
            {
                "no .jpeg left": "! ls photos | grep -q '\\.jpeg$'",
                "three .jpg": "test $(ls photos | grep -c '\\.jpg$') = 3",
                "contents kept": "test \"$(cat 'photos/beach day.jpg')\" = beach && "
                'test "$(cat photos/cat.jpg)" = cat',
                "others untouched": "test -f photos/notes.txt",
            },
            [
                "cd photos",
                'for f in *.jpeg; do mv -- "$f" "${f%.jpeg}.jpg"; done',
                "cd /app",
            ],
            files={
                "photos/beach day.jpeg": "beach",
                "photos/cat.jpeg": "cat",
                "photos/dog.jpg": "dog",
                "photos/notes.txt": "not a photo",
            },
        ),
        _t(
            "symlink-current",
            "files",
            "easy",
            "Make /app/current a symbolic link to the releases/v2 directory, using the "
            "relative target `releases/v2`.",
            {
                "is a symlink": "test -L current",
                "relative target": 'test "$(readlink current)" = releases/v2',
                "resolves": 'test "$(cat current/VERSION)" = 2.0.0',
            },
            ["ln -sfn releases/v2 current"],
            files={"releases/v1/VERSION": "1.0.0\n", "releases/v2/VERSION": "2.0.0\n"},
        ),
        # ---------------------------------------------------------------- CSV and JSON
        _t(
            "csv-column-sum",
            "data",
            "easy",
            "Sum the `amount` column of /app/sales.csv (it has a header row) and write the "
            "total, as an integer, to /app/total.txt.",
            {
                "total.txt exists": "test -f total.txt",
                "total": 'test "$(tr -d " \\n" < total.txt)" = 1234',
            },
            ["awk -F, 'NR>1 {s += $3} END {print s}' sales.csv > total.txt"],
            files={
                "sales.csv": "id,region,amount\n1,north,100\n2,south,250\n3,north,34\n"
                "4,east,500\n5,west,350\n"
            },
        ),
        _t(
            "csv-filter-rows",
            "data",
            "easy",
            "Write the header and the rows of /app/customers.csv whose country is DE to "
            "/app/de.csv, in the original order.",
            {
                "de.csv exists": "test -f de.csv",
                "content": "printf 'name,country,since\\nAnna,DE,2019\\nJonas,DE,2022\\n' "
                "| diff - de.csv",
            },
            ["awk -F, 'NR==1 || $2==\"DE\"' customers.csv > de.csv"],
            files={
                "customers.csv": "name,country,since\nAnna,DE,2019\nLuc,FR,2020\n"
                "Jonas,DE,2022\nMaria,ES,2018\n"
            },
        ),
        _t(
            "csv-sort-by-score",
            "data",
            "medium",
            "Sort /app/scores.csv by the numeric `score` column, highest first, keeping the "
            "header as the first line; write the result to /app/sorted.csv.",
            {
                "sorted.csv exists": "test -f sorted.csv",
                "content": "printf 'player,score\\neve,120\\nbob,99\\nann,87\\ndan,9\\n' "
                "| diff - sorted.csv",
            },
            ["{ head -n 1 scores.csv; tail -n +2 scores.csv | sort -t, -k2,2nr; } > sorted.csv"],
            files={"scores.csv": "player,score\nann,87\nbob,99\ndan,9\neve,120\n"},
        ),
        _t(
            "csv-join",
            "data",
            "medium",
            "Join /app/names.csv (id,name) and /app/ages.csv (id,age) on id. Write "
            "/app/people.csv with the header `id,name,age` and one row per id present in both "
            "files, ordered by id.",
            {
                "people.csv exists": "test -f people.csv",
                "content": "printf 'id,name,age\\n1,ann,31\\n2,bob,45\\n4,dan,27\\n' "
                "| diff - people.csv",
            },
            [
                "{ echo id,name,age; join -t, <(tail -n +2 names.csv | sort -t, -k1,1) "
                "<(tail -n +2 ages.csv | sort -t, -k1,1); } > people.csv"
            ],
            files={
                "names.csv": "id,name\n2,bob\n1,ann\n3,cy\n4,dan\n",
                "ages.csv": "id,age\n4,27\n1,31\n2,45\n5,60\n",
            },
        ),
        _t(
            "json-active-users",
            "data",
            "easy",
            "/app/users.json is a JSON array of users. Write the `name` of every user whose "
            "`active` field is true to /app/active.txt, one per line, in file order.",
            {
                "active.txt exists": "test -f active.txt",
                "content": "printf 'ada\\ngrace\\n' | diff - active.txt",
            },
            ["jq -r '.[] | select(.active) | .name' users.json > active.txt"],
            files={
                "users.json": '[{"name": "ada", "active": true}, {"name": "alan", "active": '
                'false}, {"name": "grace", "active": true}, {"name": "ken"}]\n'
            },
        ),
        _t(
            "json-to-csv",
            "data",
            "medium",
            "Convert /app/items.json (an array of objects with id, name and price) to "
            "/app/items.csv: header `id,name,price`, then one unquoted row per item, in order.",
            {
                "items.csv exists": "test -f items.csv",
                "content": "printf 'id,name,price\\n1,pen,1.5\\n2,book,12\\n3,lamp,30.25\\n' "
                "| diff - items.csv",
            },
            [
                'jq -r \'"id,name,price", (.[] | "\\(.id),\\(.name),\\(.price)")\' '
                "items.json > items.csv"
            ],
            files={
                "items.json": '[{"id": 1, "name": "pen", "price": 1.5}, {"id": 2, "name": '
                '"book", "price": 12}, {"id": 3, "name": "lamp", "price": 30.25}]\n'
            },
        ),
        _t(
            "json-update-config",
            "data",
            "medium",
            "In /app/config.json set `server.port` to 8081 and add `server.tls` = true, "
            "keeping every other setting. The file must stay valid JSON.",
            {
                "valid json": "python3 -c 'import json; json.load(open(\"config.json\"))'",
                "port": 'python3 -c \'import json; c=json.load(open("config.json")); '
                'assert c["server"]["port"] == 8081\'',
                "tls": 'python3 -c \'import json; c=json.load(open("config.json")); '
                'assert c["server"]["tls"] is True\'',
                "rest kept": 'python3 -c \'import json; c=json.load(open("config.json")); '
                'assert c["server"]["host"] == "0.0.0.0" and c["debug"] is False\'',
            },
            [
                "jq '.server.port = 8081 | .server.tls = true' config.json > config.new "
                "&& mv config.new config.json"
            ],
            files={
                "config.json": '{"server": {"host": "0.0.0.0", "port": 8080}, "debug": false}\n'
            },
        ),
        _t(
            "status-code-counts",
            "data",
            "medium",
            "/app/access.log is a web server log in the common log format. Count the requests "
            "per HTTP status code and write `code count` lines, sorted by code, to "
            "/app/status_counts.txt.",
            {
                "file exists": "test -f status_counts.txt",
                "content": "printf '200 9\\n301 2\\n404 3\\n500 2\\n' | diff - status_counts.txt",
            },
            [
                "awk '{print $9}' access.log | sort | uniq -c | awk '{print $2, $1}' "
                "> status_counts.txt"
            ],
            files={"access.log": ACCESS_LOG},
        ),
        _t(
            "sqlite-top-customer",
            "data",
            "medium",
            "/app/shop.db is a SQLite database with tables customers(id, name) and "
            "orders(id, customer_id, amount). Write the name of the customer with the largest "
            "total order amount to /app/top_customer.txt.",
            {
                "file exists": "test -f top_customer.txt",
                "name": 'test "$(tr -d "\\n" < top_customer.txt)" = Chen',
            },
            [
                "sqlite3 shop.db 'SELECT c.name FROM customers c JOIN orders o ON "
                "o.customer_id = c.id GROUP BY c.id ORDER BY SUM(o.amount) DESC LIMIT 1' "
                "> top_customer.txt"
            ],
            setup=(
                'sqlite3 shop.db "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT); '
                "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, amount REAL); "
                "INSERT INTO customers VALUES (1,'Ava'),(2,'Ben'),(3,'Chen'); "
                "INSERT INTO orders(customer_id, amount) VALUES (1,50),(1,70),(2,300),"
                '(3,120),(3,200),(2,10);"'
            ),
        ),
        _t(
            "tsv-to-json-lines",
            "data",
            "hard",
            "Convert /app/events.tsv (tab-separated, header `ts<TAB>user<TAB>action`) to JSON "
            "Lines in /app/events.jsonl: one object per row with the keys ts (an integer), "
            "user and action (strings).",
            {
                "file exists": "test -f events.jsonl",
                "rows": "python3 - <<'EOF'\nimport json\nrows=[json.loads(l) for l in "
                "open('events.jsonl') if l.strip()]\nassert rows == [{'ts': 1, 'user': 'ann', "
                "'action': 'login'}, {'ts': 5, 'user': 'bob', 'action': 'view page'}, "
                "{'ts': 9, 'user': 'ann', 'action': 'logout'}], rows\nEOF",
            },
            [
                'python3 -c \'import csv, json, sys\nfor r in csv.DictReader(open("events.tsv"),'
                ' delimiter="\\t"):\n    r["ts"] = int(r["ts"])\n    print(json.dumps(r))\''
                " > events.jsonl"
            ],
            files={
                "events.tsv": "ts\tuser\taction\n1\tann\tlogin\n5\tbob\tview page\n9\tann\tlogout\n"
            },
        ),
        # ---------------------------------------------------------------- scripting
        _t(
            "greet-script",
            "scripting",
            "easy",
            "Create an executable bash script /app/greet.sh: `./greet.sh NAME` prints "
            "`Hello, NAME!` and `./greet.sh` with no argument prints `Hello, world!`.",
            {
                "executable": "test -x greet.sh",
                "with a name": 'test "$(./greet.sh Ada)" = "Hello, Ada!"',
                "another name": 'test "$(./greet.sh "Grace Hopper")" = "Hello, Grace Hopper!"',
                "default": 'test "$(./greet.sh)" = "Hello, world!"',
            },
            [
                "printf '#!/bin/bash\\necho \"Hello, ${1:-world}!\"\\n' > greet.sh",
                "chmod +x greet.sh",
            ],
        ),
        _t(
            "fizzbuzz",
            "scripting",
            "easy",
            "Write /app/fizzbuzz.py: `python3 fizzbuzz.py N` prints the numbers 1..N, one per "
            "line, with Fizz for multiples of 3, Buzz for multiples of 5 and FizzBuzz for "
            "multiples of both.",
            {
                "N=15": "python3 fizzbuzz.py 15 | sed -n '3p;5p;15p;14p' | tr '\\n' ' ' "
                "| grep -qx 'Fizz Buzz 14 FizzBuzz '",
                "N=100 length": "test $(python3 fizzbuzz.py 100 | wc -l) = 100",
                "N=1": 'test "$(python3 fizzbuzz.py 1)" = 1',
            },
            [
                "cat > fizzbuzz.py <<'EOF'\nimport sys\n\n"
                "for i in range(1, int(sys.argv[1]) + 1):\n"
                "    out = ('Fizz' if i % 3 == 0 else '') + ('Buzz' if i % 5 == 0 else '')\n"
                "    print(out or i)\nEOF"
            ],
        ),
        _t(
            "fix-sum-script",
            "debugging",
            "medium",
            "/app/sum.sh should print the sum of the integers in the file given as its "
            "argument (one per line), but it prints the wrong number. Fix the script.",
            {
                "given file": 'test "$(bash sum.sh nums.txt)" = 60',
                "another file": 'printf "5\\n-2\\n100\\n" > /tmp/other.txt && '
                'test "$(bash sum.sh /tmp/other.txt)" = 103',
            },
            ["sed -i 's/total=$n/total=$((total + n))/' sum.sh"],
            files={
                "sum.sh": "#!/bin/bash\ntotal=0\nwhile read -r n; do\n  total=$n\ndone < "
                '"$1"\necho "$total"\n',
                "nums.txt": "10\n20\n30\n",
            },
        ),
        _t(
            "fix-mean-python",
            "debugging",
            "medium",
            "`python3 /app/stats.py FILE` should print the mean of the numbers in FILE (one "
            "per line) with two decimals, but it is wrong for /app/data.txt. Fix stats.py.",
            {
                "given data": 'test "$(python3 stats.py data.txt)" = 2.50',
                "hidden data": "printf '1\\n2\\n' > /tmp/h.txt && "
                'test "$(python3 stats.py /tmp/h.txt)" = 1.50',
                "floats": "printf '0.5\\n1.0\\n' > /tmp/f.txt && "
                'test "$(python3 stats.py /tmp/f.txt)" = 0.75',
            },
            ["sed -i 's/len(values) - 1/len(values)/' stats.py"],
            files={
                "stats.py": "import sys\n\nvalues = [float(x) for x in open(sys.argv[1]) if "
                "x.strip()]\nprint(f'{sum(values) / (len(values) - 1):.2f}')\n",
                "data.txt": "1\n2\n3\n4\n",
            },
        ),
        _t(
            "makefile-build",
            "build",
            "hard",
            "Write /app/Makefile with a target `build` that creates out/all.txt by "
            "concatenating src/*.txt in name order (creating out/ if needed), and a target "
            "`clean` that removes out/. `build` must be the default target.",
            {
                "make builds": "make -s >/dev/null && printf 'a\\nb\\nc\\n' | diff - out/all.txt",
                "new source picked up": "make -s clean >/dev/null && echo d > src/d.txt && "
                "make -s build >/dev/null && printf 'a\\nb\\nc\\nd\\n' | diff - out/all.txt",
                "clean removes": "make -s build >/dev/null && make -s clean >/dev/null "
                "&& test ! -e out",
            },
            [
                "printf 'build:\\n\\tmkdir -p out\\n\\tcat $(sort $(wildcard src/*.txt)) "
                "> out/all.txt\\n\\nclean:\\n\\trm -rf out\\n\\n.PHONY: build clean\\n' "
                "> Makefile"
            ],
            files={"src/a.txt": "a\n", "src/b.txt": "b\n", "src/c.txt": "c\n"},
        ),
        _t(
            "batch-resize-report",
            "scripting",
            "medium",
            "For every .txt file in /app/docs, write a line `NAME WORDS` (file name without "
            "the directory, then its word count) to /app/report.txt, sorted by name.",
            {
                "report exists": "test -f report.txt",
                "content": "printf 'a.txt 3\\nb.txt 1\\nc.txt 5\\n' | diff - report.txt",
            },
            [
                'for f in docs/*.txt; do echo "$(basename "$f") $(wc -w < "$f")"; done '
                "| sort > report.txt"
            ],
            files={
                "docs/b.txt": "one\n",
                "docs/a.txt": "one two three\n",
                "docs/c.txt": "one two\nthree four five\n",
                "docs/skip.md": "not counted\n",
            },
        ),
        # ---------------------------------------------------------------- archives
        _t(
            "make-tarball",
            "archives",
            "easy",
            "Create /app/backup.tar.gz, a gzip-compressed tar archive of the directory "
            "/app/docs, with member paths starting with `docs/`.",
            {
                "archive exists": "test -f backup.tar.gz",
                "gzip": "gzip -t backup.tar.gz",
                "members": "tar -tzf backup.tar.gz | grep -qx 'docs/guide.md' && "
                "tar -tzf backup.tar.gz | grep -qx 'docs/api/ref.md'",
                "contents": 'test "$(tar -xzOf backup.tar.gz docs/api/ref.md)" = reference',
            },
            ["tar -czf backup.tar.gz docs"],
            files={"docs/guide.md": "guide", "docs/api/ref.md": "reference"},
        ),
        _t(
            "extract-zip",
            "archives",
            "easy",
            "Extract /app/bundle.zip into the directory /app/extracted.",
            {
                "directory": "test -d extracted",
                "files": 'test "$(cat extracted/readme.txt)" = hello && '
                'test "$(cat extracted/conf/app.conf)" = "port=1"',
            },
            ["mkdir -p extracted && unzip -o -q bundle.zip -d extracted"],
            setup=(
                "mkdir -p z/conf && echo hello > z/readme.txt && echo port=1 > z/conf/app.conf "
                "&& (cd z && zip -q -r -X ../bundle.zip .) && rm -rf z"
            ),
        ),
        _t(
            "find-fatal-in-archive",
            "archives",
            "medium",
            "/app/logs.tar.gz holds several log files. Write the file name (without any "
            "directory) of the one log that contains the word FATAL to /app/fatal.txt.",
            {
                "file exists": "test -f fatal.txt",
                "name": 'test "$(tr -d "\\n" < fatal.txt)" = worker-3.log',
            },
            [
                "mkdir -p /tmp/logs && tar -xzf logs.tar.gz -C /tmp/logs",
                "grep -rl FATAL /tmp/logs | xargs -n1 basename > fatal.txt",
            ],
            setup=(
                'mkdir -p L/var && for i in 1 2 3 4; do echo "worker $i ok" > L/var/worker-$i.log;'
                " done && echo 'FATAL: out of memory' >> L/var/worker-3.log && "
                "tar --mtime=2024-01-01 -czf logs.tar.gz -C L var && rm -rf L"
            ),
        ),
        _t(
            "repack-archive",
            "archives",
            "hard",
            "/app/data.tar.bz2 contains a directory `data/`. Create /app/data.zip holding the "
            "same files (paths starting with `data/`), but without any *.tmp file.",
            {
                "zip exists": "test -f data.zip && unzip -tq data.zip >/dev/null",
                "files in": "unzip -Z1 data.zip | grep -qx data/keep.txt && "
                "unzip -Z1 data.zip | grep -qx data/sub/also.txt",
                "no tmp": "! unzip -Z1 data.zip | grep -q '\\.tmp$'",
                "content": 'test "$(unzip -p data.zip data/sub/also.txt)" = also',
            },
            [
                "mkdir -p /tmp/re && tar -xjf data.tar.bz2 -C /tmp/re",
                "cd /tmp/re && rm -f /app/data.zip && zip -q -r /app/data.zip data -x '*.tmp'",
                "cd /app",
            ],
            setup=(
                "mkdir -p data/sub && echo keep > data/keep.txt && echo junk > data/x.tmp && "
                "echo also > data/sub/also.txt && echo junk > data/sub/y.tmp && "
                "tar --mtime=2024-01-01 -cjf data.tar.bz2 data && rm -rf data"
            ),
        ),
        # ---------------------------------------------------------------- permissions
        _t(
            "make-scripts-executable",
            "permissions",
            "easy",
            "Make every .sh file under /app/scripts (at any depth) executable, and leave the "
            "other files' permissions as they are.",
            {
                "all .sh executable": "test -z \"$(find scripts -name '*.sh' ! -perm -u+x)\"",
                "count": "test $(find scripts -name '*.sh' -perm -u+x | wc -l) = 3",
                "others not executable": "test ! -x scripts/README && "
                "test ! -x scripts/lib/data.txt",
            },
            ["find scripts -name '*.sh' -exec chmod +x {} +"],
            files={
                "scripts/build.sh": "echo build\n",
                "scripts/lib/util.sh": "echo util\n",
                "scripts/lib/deploy/run.sh": "echo run\n",
                "scripts/README": "docs\n",
                "scripts/lib/data.txt": "data\n",
            },
        ),
        _t(
            "private-files",
            "permissions",
            "easy",
            "Lock down /app/secrets: the directory must have mode 700 and every file in it "
            "mode 600.",
            {
                "dir mode": 'test "$(stat -c %a secrets)" = 700',
                "file modes": 'test -z "$(find secrets -type f ! -perm 600)" && '
                "test $(find secrets -type f | wc -l) = 2",
            },
            ["chmod 700 secrets && chmod 600 secrets/*"],
            files={"secrets/api.key": "k3y\n", "secrets/db.pass": "pa55\n"},
            setup="chmod 755 secrets && chmod 644 secrets/*",
        ),
        _t(
            "fix-permission-denied",
            "permissions",
            "medium",
            "Running /app/bin/report fails with `Permission denied`. Make it work so that "
            "`/app/bin/report` prints `report ok`, without editing its content.",
            {
                "runs": 'test "$(/app/bin/report)" = "report ok"',
                "content unchanged": "grep -qx 'echo \"report ok\"' bin/report",
            },
            ["chmod u+x bin/report"],
            files={"bin/report": '#!/bin/sh\necho "report ok"\n'},
        ),
        # ---------------------------------------------------------------- git
        _t(
            "git-commit-file",
            "git",
            "easy",
            "The git repository /app/repo has an untracked file notes.md. Commit it with the "
            "message `Add notes`, leaving the working tree clean.",
            {
                "message": 'test "$(git -C repo log -1 --format=%s)" = "Add notes"',
                "tracked": "git -C repo ls-files --error-unmatch notes.md >/dev/null",
                "clean": 'test -z "$(git -C repo status --porcelain)"',
                "history kept": "test $(git -C repo rev-list --count HEAD) = 2",
            },
            ["cd repo", "git add notes.md", "git commit -q -m 'Add notes'", "cd /app"],
            setup=_GIT
            + (
                "mkdir repo && cd repo && git init -q && echo app > app.txt && git add app.txt "
                "&& git commit -q -m init && echo notes > notes.md"
            ),
        ),
        _t(
            "git-find-commit",
            "git",
            "medium",
            "In the git repository /app/repo, find the commit whose message mentions "
            "`typo` and write its full 40-character hash to /app/typo_commit.txt.",
            {
                "file exists": "test -f typo_commit.txt",
                "hash": 'test "$(tr -d "\\n" < typo_commit.txt)" = '
                '"$(git -C repo log --grep=typo --format=%H)"',
            },
            ["git -C repo log --grep=typo --format=%H > typo_commit.txt"],
            setup=_GIT
            + (
                "mkdir repo && cd repo && git init -q && for m in 'init' 'add parser' "
                "'fix typo in docs' 'speed up parser'; do echo \"$m\" >> log.txt && "
                'git add log.txt && git commit -q -m "$m"; done'
            ),
        ),
        _t(
            "git-restore-file",
            "git",
            "easy",
            "Someone edited /app/repo/app.py by mistake. Restore it to its last committed "
            "version; keep the new, uncommitted file /app/repo/todo.txt.",
            {
                "restored": 'test -z "$(git -C repo diff --name-only)"',
                "content": "grep -qx 'print(\"v1\")' repo/app.py",
                "todo kept": "test -f repo/todo.txt",
            },
            ["git -C repo checkout -- app.py"],
            setup=_GIT
            + (
                "mkdir repo && cd repo && git init -q && echo 'print(\"v1\")' > app.py && "
                "git add app.py && git commit -q -m v1 && echo 'print(\"broken\")' > app.py && "
                "echo 'write tests' > todo.txt"
            ),
        ),
        # ---------------------------------------------------------------- shell state
        _t(
            "env-config-file",
            "scripting",
            "medium",
            "Create /app/app.env with two lines, `APP_MODE=production` and `APP_WORKERS=` "
            "followed by the number of lines in /app/hosts.txt, so that `. /app/app.env` "
            "sets both variables.",
            {
                "sourced": '. ./app.env && test "$APP_MODE" = production && '
                'test "$APP_WORKERS" = 4',
                "two lines": "test $(grep -c . app.env) = 2",
            },
            [
                "n=$(wc -l < hosts.txt)",
                'printf "APP_MODE=production\\nAPP_WORKERS=%s\\n" "$n" > app.env',
            ],
            files={"hosts.txt": "h1\nh2\nh3\nh4\n"},
        ),
        _t(
            "background-producer",
            "processes",
            "hard",
            "/app/produce.sh writes 50 numbered lines to /app/out.txt, slowly (about 2 s). "
            "Run it in the background, and once it has finished write the number of lines of "
            "out.txt to /app/count.txt. Both files must be complete.",
            {
                "out complete": "test $(wc -l < out.txt) = 50",
                "count": 'test "$(tr -d " \\n" < count.txt)" = 50',
            },
            ["./produce.sh &", "wait; wc -l < out.txt > count.txt"],
            files={
                "produce.sh": "#!/bin/bash\n: > out.txt\nfor i in $(seq 1 50); do echo "
                '"line $i" >> out.txt; sleep 0.04; done\n'
            },
            setup="chmod +x produce.sh",
        ),
    ]
    return t


@cache
def _cached() -> tuple[TerminalTask, ...]:
    return tuple(_tasks())


def bundled_tasks() -> list[TerminalTask]:
    """All bundled tasks (a fresh list of the shared, frozen task objects)."""
    return list(_cached())
