# name: contents kept
test "$(cat 'photos/beach day.jpg')" = beach && test "$(cat photos/cat.jpg)" = cat
