echo build
