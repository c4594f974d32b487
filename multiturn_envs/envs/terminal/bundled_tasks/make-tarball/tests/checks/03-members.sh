# name: members
tar -tzf backup.tar.gz | grep -qx 'docs/guide.md' && tar -tzf backup.tar.gz | grep -qx 'docs/api/ref.md'
