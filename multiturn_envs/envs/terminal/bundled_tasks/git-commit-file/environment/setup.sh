export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.invalid GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.invalid GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
git config --global user.name dev && git config --global user.email dev@example.invalid
git config --global init.defaultBranch main
mkdir repo && cd repo && git init -q && echo app > app.txt && git add app.txt && git commit -q -m init && echo notes > notes.md
