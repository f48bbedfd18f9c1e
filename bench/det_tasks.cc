#include "bench/det_tasks.h"

namespace lathe::bench {

const std::vector<std::pair<std::string, double>>& DetTasks() {
  static const std::vector<std::pair<std::string, double>> kTasks = {
      {"conv2d:c=3,dilation=1,epilogue=bias,groups=1,h=640,k=16,kblock=16,layout=nchw,n=1,pad=1,r="
       "3,"
       "s=3,stride=2,w=640",
       1},
      {"conv2d:c=16,dilation=1,epilogue=bias_hswish_scale_shift,groups=16,h=320,k=16,layout="
       "nchw16c,"
       "n=1,pad=1,r=3,s=3,stride=1,w=320",
       1},
      {"conv2d:c=16,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=320,k=32,layout=nchw16c,"
       "n="
       "1,pad=0,r=1,s=1,stride=1,w=320",
       1},
      {"conv2d:c=32,dilation=1,epilogue=bias,groups=32,h=320,k=32,layout=nchw16c,n=1,pad=1,r=3,s=3,"
       "stride=2,w=320",
       1},
      {"conv2d:c=32,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=160,k=48,layout=nchw16c,"
       "n="
       "1,pad=0,r=1,s=1,stride=1,w=160",
       1},
      {"conv2d:c=48,dilation=1,epilogue=bias_hswish_scale_shift,groups=48,h=160,k=48,layout="
       "nchw16c,"
       "n=1,pad=1,r=3,s=3,stride=1,w=160",
       1},
      {"conv2d:c=48,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=160,k=48,layout=nchw16c,"
       "n="
       "1,pad=0,r=1,s=1,stride=1,w=160",
       1},
      {"conv2d:c=48,dilation=1,epilogue=bias,groups=48,h=160,k=48,layout=nchw16c,n=1,pad=1,r=3,s=3,"
       "stride=2,w=160",
       1},
      {"conv2d:c=48,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=80,k=96,layout=nchw16c,"
       "n="
       "1,pad=0,r=1,s=1,stride=1,w=80",
       1},
      {"conv2d:c=96,dilation=1,epilogue=bias_hswish_scale_shift,groups=96,h=80,k=96,layout=nchw16c,"
       "n="
       "1,pad=1,r=3,s=3,stride=1,w=80",
       1},
      {"conv2d:c=96,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=80,k=96,layout=nchw16c,"
       "n="
       "1,pad=0,r=1,s=1,stride=1,w=80",
       1},
      {"conv2d:c=96,dilation=1,epilogue=bias,groups=96,h=80,k=96,layout=nchw16c,n=1,pad=1,r=3,s=3,"
       "stride=2,w=80",
       1},
      {"conv2d:c=96,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=40,k=192,layout=nchw16c,"
       "n="
       "1,pad=0,r=1,s=1,stride=1,w=40",
       1},
      {"conv2d:c=192,dilation=1,epilogue=bias_hswish_scale_shift,groups=192,h=40,k=192,layout="
       "nchw16c,n=1,pad=2,r=5,s=5,stride=1,w=40",
       4},
      {"conv2d:c=192,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=40,k=192,layout="
       "nchw16c,"
       "n=1,pad=0,r=1,s=1,stride=1,w=40",
       4},
      {"conv2d:c=192,dilation=1,epilogue=bias,groups=192,h=40,k=192,layout=nchw16c,n=1,pad=2,r=5,s="
       "5,"
       "stride=2,w=40",
       1},
      {"pool2d:c=192,h=20,kind=avg,layout=nchw16c,n=1,pad=0,r=20,s=20,stride=1,w=20", 1},
      {"conv2d:c=192,dilation=1,epilogue=bias_relu,groups=1,h=1,k=48,layout=nchw16c,n=1,pad=0,r=1,"
       "s="
       "1,stride=1,w=1",
       1},
      {"conv2d:c=48,dilation=1,epilogue=bias_hsig0.166666701:0.5,groups=1,h=1,k=192,layout=nchw16c,"
       "n="
       "1,pad=0,r=1,s=1,stride=1,w=1",
       1},
      {"ewise:a=1x12x20x20x16,b=1x12x1x1x16,binary=mul,epilogue=none", 1},
      {"conv2d:c=192,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=20,k=384,layout="
       "nchw16c,"
       "n=1,pad=0,r=1,s=1,stride=1,w=20",
       1},
      {"conv2d:c=384,dilation=1,epilogue=bias_hswish_scale_shift,groups=384,h=20,k=384,layout="
       "nchw16c,n=1,pad=2,r=5,s=5,stride=1,w=20",
       3},
      {"pool2d:c=384,h=20,kind=avg,layout=nchw16c,n=1,pad=0,r=20,s=20,stride=1,w=20", 1},
      {"conv2d:c=384,dilation=1,epilogue=bias_relu,groups=1,h=1,k=96,layout=nchw16c,n=1,pad=0,r=1,"
       "s="
       "1,stride=1,w=1",
       1},
      {"conv2d:c=96,dilation=1,epilogue=bias_hsig0.166666701:0.5,groups=1,h=1,k=384,layout=nchw16c,"
       "n="
       "1,pad=0,r=1,s=1,stride=1,w=1",
       1},
      {"ewise:a=1x24x20x20x16,b=1x24x1x1x16,binary=mul,epilogue=none", 1},
      {"conv2d:c=384,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=20,k=384,layout="
       "nchw16c,"
       "n=1,pad=0,r=1,s=1,stride=1,w=20",
       3},
      {"conv2d:c=48,dilation=1,epilogue=bias,groups=1,h=160,k=12,kblock=12,layout=nchw16c,n=1,pad="
       "0,"
       "r=1,s=1,stride=1,w=160",
       1},
      {"conv2d:c=96,dilation=1,epilogue=bias,groups=1,h=80,k=18,kblock=18,layout=nchw16c,n=1,pad=0,"
       "r="
       "1,s=1,stride=1,w=80",
       1},
      {"conv2d:c=192,dilation=1,epilogue=bias,groups=1,h=40,k=42,kblock=42,layout=nchw16c,n=1,pad="
       "0,"
       "r=1,s=1,stride=1,w=40",
       1},
      {"conv2d:c=384,dilation=1,epilogue=bias,groups=1,h=20,k=360,kblock=8,layout=nchw16c,n=1,pad="
       "0,"
       "r=1,s=1,stride=1,w=20",
       1},
      {"conv2d:c=360,dilation=1,epilogue=none,groups=1,h=20,k=96,kblock=16,layout=nchw8c,n=1,pad=0,"
       "r="
       "1,s=1,stride=1,w=20",
       1},
      {"pool2d:c=96,h=20,kind=avg,layout=nchw16c,n=1,pad=0,r=20,s=20,stride=1,w=20", 1},
      {"conv2d:c=96,dilation=1,epilogue=bias_relu,groups=1,h=1,k=24,kblock=8,layout=nchw16c,n=1,"
       "pad="
       "0,r=1,s=1,stride=1,w=1",
       4},
      {"conv2d:c=24,dilation=1,epilogue=bias_hsig0.200000003:0.5,groups=1,h=1,k=96,kblock=16,"
       "layout="
       "nchw8c,n=1,pad=0,r=1,s=1,stride=1,w=1",
       4},
      {"ewise:a=1x6x20x20x16,b=1x6x1x1x16,binary=mul,epilogue=res", 1},
      {"conv2d:c=42,dilation=1,epilogue=none,groups=1,h=40,k=96,kblock=16,layout=nchw42c,n=1,pad=0,"
       "r="
       "1,s=1,stride=1,w=40",
       1},
      {"pool2d:c=96,h=40,kind=avg,layout=nchw16c,n=1,pad=0,r=40,s=40,stride=1,w=40", 1},
      {"ewise:a=1x6x40x40x16,b=1x6x1x1x16,binary=mul,epilogue=res", 1},
      {"conv2d:c=18,dilation=1,epilogue=none,groups=1,h=80,k=96,kblock=16,layout=nchw18c,n=1,pad=0,"
       "r="
       "1,s=1,stride=1,w=80",
       1},
      {"pool2d:c=96,h=80,kind=avg,layout=nchw16c,n=1,pad=0,r=80,s=80,stride=1,w=80", 1},
      {"ewise:a=1x6x80x80x16,b=1x6x1x1x16,binary=mul,epilogue=res", 1},
      {"conv2d:c=12,dilation=1,epilogue=none,groups=1,h=160,k=96,kblock=16,layout=nchw12c,n=1,pad="
       "0,"
       "r=1,s=1,stride=1,w=160",
       1},
      {"pool2d:c=96,h=160,kind=avg,layout=nchw16c,n=1,pad=0,r=160,s=160,stride=1,w=160", 1},
      {"ewise:a=1x6x160x160x16,b=1x6x1x1x16,binary=mul,epilogue=res", 1},
      {"ewise:a=1x6x40x40x16,b=1x6x20x20x16,binary=add,epilogue=none,upsample=1x1x2x2x1", 1},
      {"ewise:a=1x6x80x80x16,b=1x6x40x40x16,binary=add,epilogue=none,upsample=1x1x2x2x1", 1},
      {"ewise:a=1x6x160x160x16,b=1x6x80x80x16,binary=add,epilogue=none,upsample=1x1x2x2x1", 1},
      {"conv2d:c=96,dilation=1,epilogue=none,groups=1,h=20,k=24,kblock=8,layout=nchw16c,n=1,pad=1,"
       "r="
       "3,s=3,stride=1,w=20",
       1},
      {"pool2d:c=24,h=20,kind=avg,layout=nchw8c,n=1,pad=0,r=20,s=20,stride=1,w=20", 1},
      {"conv2d:c=24,dilation=1,epilogue=bias_relu,groups=1,h=1,k=6,kblock=6,layout=nchw8c,n=1,pad="
       "0,"
       "r=1,s=1,stride=1,w=1",
       4},
      {"conv2d:c=6,dilation=1,epilogue=bias_hsig0.200000003:0.5,groups=1,h=1,k=24,kblock=8,layout="
       "nchw6c,n=1,pad=0,r=1,s=1,stride=1,w=1",
       4},
      {"ewise:a=1x3x20x20x8,b=1x3x1x1x8,binary=mul,epilogue=res", 1},
      {"conv2d:c=96,dilation=1,epilogue=none,groups=1,h=40,k=24,kblock=8,layout=nchw16c,n=1,pad=1,"
       "r="
       "3,s=3,stride=1,w=40",
       1},
      {"pool2d:c=24,h=40,kind=avg,layout=nchw8c,n=1,pad=0,r=40,s=40,stride=1,w=40", 1},
      {"ewise:a=1x3x40x40x8,b=1x3x1x1x8,binary=mul,epilogue=res", 1},
      {"conv2d:c=96,dilation=1,epilogue=none,groups=1,h=80,k=24,kblock=8,layout=nchw16c,n=1,pad=1,"
       "r="
       "3,s=3,stride=1,w=80",
       1},
      {"pool2d:c=24,h=80,kind=avg,layout=nchw8c,n=1,pad=0,r=80,s=80,stride=1,w=80", 1},
      {"ewise:a=1x3x80x80x8,b=1x3x1x1x8,binary=mul,epilogue=res", 1},
      {"conv2d:c=96,dilation=1,epilogue=none,groups=1,h=160,k=24,kblock=8,layout=nchw16c,n=1,pad=1,"
       "r="
       "3,s=3,stride=1,w=160",
       1},
      {"pool2d:c=24,h=160,kind=avg,layout=nchw8c,n=1,pad=0,r=160,s=160,stride=1,w=160", 1},
      {"ewise:a=1x3x160x160x8,b=1x3x1x1x8,binary=mul,epilogue=res", 1},
      {"resize:c=24,coord=asymmetric,h=20,layout=nchw8c,mode=nearest,n=1,nearest=floor,oh=160,ow="
       "160,"
       "w=20",
       1},
      {"resize:c=24,coord=asymmetric,h=40,layout=nchw8c,mode=nearest,n=1,nearest=floor,oh=160,ow="
       "160,"
       "w=40",
       1},
      {"resize:c=24,coord=asymmetric,h=80,layout=nchw8c,mode=nearest,n=1,nearest=floor,oh=160,ow="
       "160,"
       "w=80",
       1},
      {"transpose:perm=0x2x1x3,shape=6x2x25600x8", 1},
      {"conv2d:c=96,dilation=1,epilogue=bias_relu,groups=1,h=160,k=24,kblock=8,layout=nchw16c,n=1,"
       "pad=1,r=3,s=3,stride=1,w=160",
       1},
      {"conv2d:c=24,dilation=1,epilogue=bias_relu,groups=1,h=160,k=96,kblock=16,layout=nchw8c,n=1,"
       "pad=0,r=1,s=1,stride=1,w=160",
       1},
      {"conv2d:c=96,dilation=1,epilogue=bias_sigmoid,groups=1,h=160,k=16,layout=nchw16c,n=1,pad=0,"
       "r="
       "1,s=1,stride=1,w=160",
       1},
      {"transpose:perm=2x0x3x1x4,shape=160x160x4x2x2", 1},
      {"transpose:perm=2x0x3x1,shape=2x2x320x320", 1},
  };
  return kTasks;
}

}  // namespace lathe::bench
