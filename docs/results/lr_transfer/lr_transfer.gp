# written by gpt --lr-grid; run inside this directory: gnuplot lr_transfer.gp
set terminal pngcairo size 1680,720 font ',9' noenhanced
set output 'lr_transfer.png'
set grid
set logscale x 2
set format x '%g'
set xlabel 'lr'
set ylabel 'final validation loss'
set key top center
set xtics rotate by -45
set multiplot layout 2,4 title 'final validation loss against lr, one curve per d_model (4 layers, 300 steps, seed 0)'
set title 'muon@muon_original (lr_rule muon_original)'
set xtics ('0.005' 0.005, '0.01' 0.01, '0.02' 0.02, '0.04' 0.04, '0.08' 0.08, '0.16' 0.16)
set xrange [0.00384615:0.208]
set yrange [2.0015:2.94974]
plot 'lr_transfer_curves.dat' index 0 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title 'd_model 64', 'lr_transfer_curves.dat' index 1 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 2 title 'd_model 128', 'lr_transfer_curves.dat' index 2 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 3 title 'd_model 256'
set title 'muon@moonlight (lr_rule sqrt_max*0.2)'
set xtics ('0.00125' 0.00125, '0.0025' 0.0025, '0.005' 0.005, '0.01' 0.01, '0.02' 0.02, '0.04' 0.04)
set xrange [0.000961538:0.052]
set yrange [2.01268:2.83861]
plot 'lr_transfer_curves.dat' index 3 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title 'd_model 64', 'lr_transfer_curves.dat' index 4 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 2 title 'd_model 128', 'lr_transfer_curves.dat' index 5 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 3 title 'd_model 256'
set title 'muon@sqrt_ratio (lr_rule sqrt_ratio)'
set xtics ('0.005' 0.005, '0.01' 0.01, '0.02' 0.02, '0.04' 0.04, '0.08' 0.08, '0.16' 0.16)
set xrange [0.00384615:0.208]
set yrange [2.02912:2.96717]
plot 'lr_transfer_curves.dat' index 6 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title 'd_model 64', 'lr_transfer_curves.dat' index 7 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 2 title 'd_model 128', 'lr_transfer_curves.dat' index 8 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 3 title 'd_model 256'
set title 'rmnp (lr_rule preset)'
set xtics ('0.00025' 0.00025, '0.0005' 0.0005, '0.001' 0.001, '0.002' 0.002, '0.004' 0.004, '0.008' 0.008, '0.016' 0.016)
set xrange [0.000192308:0.0208]
set yrange [2.50276:3.27134]
plot 'lr_transfer_curves.dat' index 9 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title 'd_model 64', 'lr_transfer_curves.dat' index 10 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 2 title 'd_model 128', 'lr_transfer_curves.dat' index 11 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 3 title 'd_model 256'
set title 'colnorm (lr_rule preset)'
set xtics ('0.00025' 0.00025, '0.0005' 0.0005, '0.001' 0.001, '0.002' 0.002, '0.004' 0.004, '0.008' 0.008, '0.016' 0.016)
set xrange [0.000192308:0.0208]
set yrange [2.49932:2.94204]
plot 'lr_transfer_curves.dat' index 12 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title 'd_model 64', 'lr_transfer_curves.dat' index 13 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 2 title 'd_model 128', 'lr_transfer_curves.dat' index 14 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 3 title 'd_model 256'
set title 'adamw (lr_rule none)'
set xtics ('0.0005' 0.0005, '0.001' 0.001, '0.002' 0.002, '0.004' 0.004, '0.008' 0.008, '0.016' 0.016)
set xrange [0.000384615:0.0208]
set yrange [2.40226:3.15591]
plot 'lr_transfer_curves.dat' index 15 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title 'd_model 64', 'lr_transfer_curves.dat' index 16 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 2 title 'd_model 128', 'lr_transfer_curves.dat' index 17 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 3 title 'd_model 256'
set title 'rmnp@unit (lr_rule unit)'
set xtics ('0.00025' 0.00025, '0.0005' 0.0005, '0.001' 0.001, '0.002' 0.002, '0.004' 0.004, '0.008' 0.008, '0.016' 0.016)
set xrange [0.000192308:0.0208]
set yrange [2.50515:3.5645]
plot 'lr_transfer_curves.dat' index 18 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title 'd_model 64', 'lr_transfer_curves.dat' index 19 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 2 title 'd_model 128', 'lr_transfer_curves.dat' index 20 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 3 title 'd_model 256'
set title 'colnorm@unit (lr_rule unit)'
set xtics ('0.00025' 0.00025, '0.0005' 0.0005, '0.001' 0.001, '0.002' 0.002, '0.004' 0.004, '0.008' 0.008, '0.016' 0.016)
set xrange [0.000192308:0.0208]
set yrange [2.5228:3.13953]
plot 'lr_transfer_curves.dat' index 21 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 1 title 'd_model 64', 'lr_transfer_curves.dat' index 22 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 2 title 'd_model 128', 'lr_transfer_curves.dat' index 23 using 1:2 with linespoints lw 1.5 pt 7 ps 0.6 lc 3 title 'd_model 256'
unset multiplot
