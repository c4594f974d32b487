# name: tracked
git -C repo ls-files --error-unmatch notes.md >/dev/null
