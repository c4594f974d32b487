# name: content
grep -qx 'print("v1")' repo/app.py
