export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.invalid GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.invalid GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
git config --global user.name dev && git config --global user.email dev@example.invalid
git config --global init.defaultBranch main
mkdir repo && cd repo && git init -q && for m in 'init' 'add parser' 'fix typo in docs' 'speed up parser'; do echo "$m" >> log.txt && git add log.txt && git commit -q -m "$m"; done
