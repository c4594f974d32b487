mkdir -p z/conf && echo hello > z/readme.txt && echo port=1 > z/conf/app.conf && (cd z && zip -q -r -X ../bundle.zip .) && rm -rf z
