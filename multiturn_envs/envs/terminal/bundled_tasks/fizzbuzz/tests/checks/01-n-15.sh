# name: N=15
python3 fizzbuzz.py 15 | sed -n '3p;5p;15p;14p' | tr '\n' ' ' | grep -qx 'Fizz Buzz 14 FizzBuzz '
