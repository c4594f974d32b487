# name: still python
python3 -I -c "import ast; ast.parse(open('src/util.py').read())"
