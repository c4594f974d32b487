# name: files in
unzip -Z1 data.zip | grep -qx data/keep.txt && unzip -Z1 data.zip | grep -qx data/sub/also.txt
