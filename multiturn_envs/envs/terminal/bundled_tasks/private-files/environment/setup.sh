chmod 755 secrets && chmod 644 secrets/*
