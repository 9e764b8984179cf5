#include "tools/Commands.h"
void bitfold::printDriverInfo(llvm::raw_ostream &out) {
  out << "CUDA driver: not queried yet\n";
}
