import sys

values = [float(x) for x in open(sys.argv[1]) if x.strip()]
print(f'{sum(values) / (len(values) - 1):.2f}')
