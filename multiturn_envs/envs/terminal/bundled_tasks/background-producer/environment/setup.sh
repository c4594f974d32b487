chmod +x produce.sh
