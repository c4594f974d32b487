# name: content unchanged
grep -qx 'echo "report ok"' bin/report
