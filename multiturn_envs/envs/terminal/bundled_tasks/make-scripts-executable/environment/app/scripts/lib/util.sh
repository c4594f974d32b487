echo util
