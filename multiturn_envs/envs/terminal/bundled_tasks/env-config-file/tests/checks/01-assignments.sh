# name: assignments
grep -qx 'APP_MODE=production' app.env && grep -qx 'APP_WORKERS=4' app.env
